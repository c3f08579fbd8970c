// Why an order waits, from the reasons the API gives as data: figures in
// words, times as dates in the reader's zone and language, and the orders
// they name as links. The API's English line is the fallback for an order
// whose reasons have no data.
import { List, Text } from "@mantine/core";
import type { ReactNode } from "react";
import { Trans } from "react-i18next";
import type { Schemas } from "../api/client";
import { i18n } from "../i18n";
import { dateTime, shortId, words } from "../lib/format";
import { AnchorLink } from "./links";

type Reason = Schemas["WaitReason"];
type Release = Schemas["Release"];

function gpus(n: number): string {
  return i18n.t("reasons.gpus", { count: n });
}

function ReleaseNote({ orgId, release }: { orgId: string; release: Release | null | undefined }) {
  if (!release) return null;
  const values = { node: release.node, at: dateTime(release.at) };
  const order = release.order;
  if (!order) return <> {i18n.t("reasons.release", values)}</>;
  if (!order.name) return <> {i18n.t("reasons.releaseOther", values)}</>;
  return (
    <>
      {" "}
      <Trans
        i18nKey="reasons.releaseWhen"
        values={{ ...values, order: order.name }}
        components={{ link: <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: order.id }} size="sm" /> }}
      />
    </>
  );
}

/** One reason as a sentence in the reader's language. */
export function reasonText(orgId: string, reason: Reason): ReactNode {
  const t = i18n.t;
  switch (reason.kind) {
    case "quota":
      return t("reasons.quota", {
        queue: reason.queue,
        model: reason.gpu_model,
        used: gpus(reason.used_gpus),
        limit: gpus(reason.limit_gpus),
        needed: gpus(reason.needed_gpus),
        ceiling: t(reason.ceiling === "maximum" ? "reasons.ceilingMaximum" : "reasons.ceilingBorrowing"),
      });
    case "capacity":
      return (
        <>
          {t("reasons.capacity", { free: gpus(reason.free_gpus), model: reason.gpu_model, needed: gpus(reason.needed_gpus) })}
          <ReleaseNote orgId={orgId} release={reason.next_release} />
        </>
      );
    case "fragmentation":
      return (
        <>
          {t("reasons.fragmentation", {
            free: gpus(reason.free_gpus),
            model: reason.gpu_model,
            withRoom: reason.nodes_with_room,
            nodes: reason.nodes_needed,
            perNode: reason.gpus_per_node,
            largest: reason.largest_free_on_one_node,
          })}
          <ReleaseNote orgId={orgId} release={reason.next_release} />
        </>
      );
    case "cpu_or_memory":
      return t("reasons.cpuOrMemory", { count: reason.nodes_with_free_gpus });
    case "held_for_reservation":
      return [
        t("reasons.heldForReservation", { holder: shortId(reason.holder), from: dateTime(reason.from) }),
        reason.fits_with_shorter_estimate ? t("reasons.heldShorter") : "",
      ].join(" ");
    case "waiting_for_preemption":
      return [
        t("reasons.preemption", { count: reason.victims }),
        reason.until ? t("reasons.preemptionUntil", { at: dateTime(reason.until) }) : "",
      ].join(" ");
    case "behind_higher_ranked":
      return t("reasons.behind", { count: reason.ahead });
    case "not_before":
      return t("reasons.notBefore", { at: dateTime(reason.at) });
    case "off_peak":
      return t("reasons.offPeak", { region: reason.region, at: dateTime(reason.at) });
    case "scoped_quota":
      return t("reasons.scopedQuota", { needed: gpus(reason.needed_gpus) });
    case "dependency":
      return (
        <Trans
          i18nKey={reason.until === "complete" ? "reasons.dependencyComplete" : "reasons.dependencyEnd"}
          values={{ order: reason.order.name ?? shortId(reason.order.id), status: words(reason.status) }}
          components={{
            link: <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: reason.order.id }} size="sm" />,
          }}
        />
      );
  }
}

export function WaitReasons({ orgId, order, short = false }: { orgId: string; order: Schemas["Order"]; short?: boolean }) {
  const reasons = order.pending_details;
  const [first] = reasons;
  if (!first) return <>{order.pending_reason}</>;
  if (short) return <>{reasonText(orgId, first)}</>;
  return (
    <List size="sm" spacing={4} data-testid="wait-reasons">
      {reasons.map((r, i) => (
        // Reasons have no id; their order is the engine's, most telling first.
        <List.Item key={`${r.kind}-${i}`}>
          <Text size="sm" span>
            {reasonText(orgId, r)}
          </Text>
        </List.Item>
      ))}
    </List>
  );
}

// Why an order waits, from the reasons the API gives as data: figures in
// words, times as dates in the reader's zone and language, the orders they
// name as links, the organization by its name, and what the reader can do
// about it. The API's English line is the fallback for an order whose
// reasons have no data.
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

/**
 * Whose queue a reason speaks of: the tenant reads "your organization"; an
 * operator reads the organization's name.
 */
export type Reader = { organization?: string };

/** One reason as a sentence in the reader's language. */
export function reasonText(orgId: string, reason: Reason, reader: Reader = {}): ReactNode {
  const t = i18n.t;
  switch (reason.kind) {
    case "quota": {
      const values = {
        organization: reader.organization,
        model: reason.gpu_model,
        used: gpus(reason.used_gpus),
        limit: gpus(reason.limit_gpus),
        needed: gpus(reason.needed_gpus),
        ceiling: t(reason.ceiling === "maximum" ? "reasons.ceilingMaximum" : "reasons.ceilingBorrowing"),
      };
      return reader.organization === undefined
        ? `${t("reasons.quotaYours", values)} ${t("reasons.quotaYoursNext")}`
        : `${t("reasons.quotaOf", values)} ${t("reasons.quotaOfNext")}`;
    }
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
        // The holder is a maintenance window or a reservation, perhaps another organization's: its id says nothing to the reader.
        t(reason.holder.startsWith("maintenance") ? "reasons.heldForMaintenance" : "reasons.heldForReservation", { from: dateTime(reason.from) }),
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
    case "pinned_by_volume": {
      const values = { volume: reason.volume, node: reason.node, state: words(reason.node_state) };
      const node =
        reason.node_state === "unhealthy"
          ? t("reasons.pinnedNodeDown", values)
          : reason.node_state === "ready"
            ? ""
            : t("reasons.pinnedNodeClosed", values);
      return [t("reasons.pinnedByVolume", values), node].filter(Boolean).join(" ");
    }
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

export function WaitReasons({
  orgId,
  order,
  short = false,
  reader = {},
}: {
  orgId: string;
  order: Schemas["Order"];
  short?: boolean;
  reader?: Reader;
}) {
  const reasons = order.pending_details;
  const [first] = reasons;
  if (!first) return <>{order.pending_reason}</>;
  if (short) return <>{reasonText(orgId, first, reader)}</>;
  return (
    <List size="sm" spacing={4} data-testid="wait-reasons">
      {reasons.map((r, i) => (
        // Reasons have no id; their order is the engine's, most telling first.
        <List.Item key={`${r.kind}-${i}`}>
          <Text size="sm" span>
            {reasonText(orgId, r, reader)}
          </Text>
        </List.Item>
      ))}
    </List>
  );
}

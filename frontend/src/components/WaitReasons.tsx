// Why an order waits, from the reasons the API gives as data: figures in
// words, times as dates in the reader's zone, and the orders they name as
// links. The API's English line is the fallback for reasons without data.
import { List, Text } from "@mantine/core";
import type { ReactNode } from "react";
import type { Schemas } from "../api/client";
import { dateTime, shortId } from "../lib/format";
import { AnchorLink } from "./links";

type Reason = Schemas["WaitReason"];
type Release = Schemas["Release"];

function gpus(n: number): string {
  return `${Number.isInteger(n) ? n : n.toFixed(3).replace(/0+$/, "")} GPU${n === 1 ? "" : "s"}`;
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

function ReleaseNote({ orgId, release }: { orgId: string; release: Release | null | undefined }) {
  if (!release) return null;
  const order = release.order;
  return (
    <>
      {" "}
      Node {release.node} frees at {dateTime(release.at)}
      {order && (
        <>
          {" "}
          when{" "}
          {order.name ? (
            <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: order.id }} size="sm">
              {order.name}
            </AnchorLink>
          ) : (
            <>another organization's order</>
          )}{" "}
          ends
        </>
      )}
      .
    </>
  );
}

/** One reason as a sentence. */
export function reasonText(orgId: string, reason: Reason): ReactNode {
  switch (reason.kind) {
    case "quota":
      return `Quota: ${reason.queue} uses ${gpus(reason.used_gpus)} of ${gpus(reason.limit_gpus)} ${reason.gpu_model} (${
        reason.ceiling === "maximum" ? "maximum" : "guarantee plus borrowing"
      }) and needs ${gpus(reason.needed_gpus)} more.`;
    case "capacity":
      return (
        <>
          {gpus(reason.free_gpus)} {reason.gpu_model} free where it may run; it needs {gpus(reason.needed_gpus)}.
          <ReleaseNote orgId={orgId} release={reason.next_release} />
        </>
      );
    case "fragmentation":
      return (
        <>
          {gpus(reason.free_gpus)} {reason.gpu_model} free in all, but {reason.nodes_with_room} of the {reason.nodes_needed} nodes it needs
          have {reason.gpus_per_node} free together (at most {reason.largest_free_on_one_node} on one node).
          <ReleaseNote orgId={orgId} release={reason.next_release} />
        </>
      );
    case "cpu_or_memory":
      return `${plural(reason.nodes_with_free_gpus, "node has", "nodes have")} the GPUs free but not the CPU or memory beside them.`;
    case "held_for_reservation":
      return `Its GPUs are held for reservation ${shortId(reason.holder)} from ${dateTime(reason.from)}${
        reason.fits_with_shorter_estimate ? "; with a duration ending before then it would start now" : ""
      }.`;
    case "waiting_for_preemption":
      return `${plural(reason.victims, "workload is", "workloads are")} stopping for it${
        reason.until ? `; their GPUs are free at ${dateTime(reason.until)}` : ""
      }.`;
    case "behind_higher_ranked":
      return `Behind ${plural(reason.ahead, "higher-ranked order", "higher-ranked orders")} for the same GPUs.`;
    case "not_before":
      return `Not before ${dateTime(reason.at)}, as asked.`;
    case "off_peak":
      return `Waiting for the off-peak window in ${reason.region} at ${dateTime(reason.at)}; its deadline still holds.`;
    case "held":
      return reason.text;
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

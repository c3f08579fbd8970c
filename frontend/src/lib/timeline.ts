// An order's history as its tenant reads it: each placement, start, stop
// (with why), move and requeue, from its attempts, in time order.
import type { Schemas } from "../api/client";

type Order = Schemas["Order"];
type Attempt = Schemas["Attempt"];

export type TimelineEvent =
  | { kind: "ordered"; at: string }
  | { kind: "placed"; at: string; nodes: string[]; from: string[] | null }
  | { kind: "started"; at: string }
  | { kind: "stopping"; at: string | null; cause: Schemas["StopCause"]; nodes: string[] }
  | { kind: "stopped"; at: string; cause: Schemas["StopCause"] | null; outcome: string | null; exitCode: number | null; nodes: string[] }
  | { kind: "requeued"; at: string }
  | { kind: "ended"; at: string; status: Schemas["OrderStatus"] };

const namesOf = (attempt: Attempt) => attempt.nodes.map((n) => n.node_name);

/** Whether two placements are on the same nodes. */
function sameNodes(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((n) => b.includes(n));
}

export function timelineOf(order: Order, attempts: Attempt[]): TimelineEvent[] {
  const events: TimelineEvent[] = [{ kind: "ordered", at: order.created_at }];
  attempts.forEach((attempt, i) => {
    const nodes = namesOf(attempt);
    const previous = i > 0 ? namesOf(attempts[i - 1] as Attempt) : null;
    events.push({ kind: "placed", at: attempt.placed_at, nodes, from: previous && !sameNodes(previous, nodes) ? previous : null });
    if (attempt.started_at) events.push({ kind: "started", at: attempt.started_at });
    if (!attempt.ended_at) {
      if (attempt.stop_cause) events.push({ kind: "stopping", at: attempt.stop_at ?? null, cause: attempt.stop_cause, nodes });
      return;
    }
    events.push({
      kind: "stopped",
      at: attempt.ended_at,
      cause: attempt.stop_cause ?? null,
      outcome: attempt.outcome ?? null,
      exitCode: attempt.exit_code ?? null,
      nodes,
    });
    // Queued again: another attempt follows, or the order waits for one.
    const again = i < attempts.length - 1 || ["queued", "scheduled", "provisioning"].includes(order.status);
    if (again) events.push({ kind: "requeued", at: attempt.ended_at });
  });
  if (order.ended_at) events.push({ kind: "ended", at: order.ended_at, status: order.status });
  return events;
}

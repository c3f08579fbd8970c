import { describe, expect, test } from "vitest";
import type { Schemas } from "../api/client";
import { timelineOf } from "./timeline";

const order = (over: Partial<Schemas["Order"]>) => ({ created_at: "2026-12-01T10:00:00Z", status: "running", ended_at: null, ...over }) as Schemas["Order"];

const attempt = (n: number, node: string, over: Partial<Schemas["Attempt"]> = {}): Schemas["Attempt"] => ({
  attempt: n,
  nodes: [{ node_id: node, node_name: node, gpu_ids: [0, 1], exit_code: null }],
  placed_at: "2026-12-01T10:01:00Z",
  started_at: "2026-12-01T10:02:00Z",
  stop_at: null,
  stop_cause: null,
  ended_at: null,
  outcome: null,
  exit_code: null,
  ...over,
});

describe("an order's timeline", () => {
  test("a drained node's instance: stopped with the drain, queued again, moved to another node", () => {
    const drained = attempt(1, "gpu-03", {
      stop_at: "2026-12-01T11:00:00Z",
      stop_cause: "node_drained",
      ended_at: "2026-12-01T11:00:05Z",
      outcome: "preempted",
    });
    const moved = attempt(2, "gpu-05", { placed_at: "2026-12-01T11:00:06Z", started_at: "2026-12-01T11:00:09Z" });
    const events = timelineOf(order({}), [drained, moved]);
    expect(events.map((e) => e.kind)).toEqual(["ordered", "placed", "started", "stopped", "requeued", "placed", "started"]);
    expect(events[3]).toMatchObject({ kind: "stopped", cause: "node_drained", nodes: ["gpu-03"] });
    expect(events[5]).toMatchObject({ kind: "placed", nodes: ["gpu-05"], from: ["gpu-03"] });
  });

  test("waiting after a stop reads as queued again; a stop still under way as stopping", () => {
    const stopped = attempt(1, "gpu-03", { stop_cause: "preempted", ended_at: "2026-12-01T11:00:05Z", outcome: "preempted" });
    expect(timelineOf(order({ status: "queued" }), [stopped]).at(-1)).toMatchObject({ kind: "requeued" });
    const stopping = attempt(1, "gpu-03", { stop_cause: "node_drained", stop_at: "2026-12-01T11:00:00Z" });
    expect(timelineOf(order({ status: "preempted" }), [stopping]).at(-1)).toMatchObject({ kind: "stopping", cause: "node_drained" });
  });

  test("a restart on the same nodes is no move; an ended order ends its timeline", () => {
    const first = attempt(1, "gpu-03", { stop_cause: "preempted", ended_at: "2026-12-01T11:00:05Z" });
    const second = attempt(2, "gpu-03", { ended_at: "2026-12-01T12:00:00Z", outcome: "completed" });
    const events = timelineOf(order({ status: "completed", ended_at: "2026-12-01T12:00:00Z" }), [first, second]);
    expect(events.filter((e) => e.kind === "placed").map((e) => e.kind === "placed" && e.from)).toEqual([null, null]);
    expect(events.at(-1)).toEqual({ kind: "ended", at: "2026-12-01T12:00:00Z", status: "completed" });
  });
});

import { describe, expect, test } from "vitest";
import type { Schemas } from "../api/client";
import { capacityByModel, groupNodes } from "./capacity";

function node(name: string, state: Schemas["NodeState"], held: number[], sick: number[] = [], gpus = 8): Schemas["Node"] {
  return {
    id: name,
    name,
    region: "us-east",
    rack: "r1",
    instance_type: `h100x${gpus}`,
    driver: "simulated",
    isolated: true,
    state,
    labels: [],
    cpu_milli: 0,
    memory_mib: 0,
    created_at: "2026-01-01T00:00:00Z",
    reservations: [],
    gpus: Array.from({ length: gpus }, (_, index) => ({
      index,
      model: "H100",
      hardware_uuid: `${name}-${index}`,
      memory_mib: 81920,
      nvlink_domain: 0,
      healthy: !sick.includes(index),
      mig_enabled: false,
      order_id: held.includes(index) ? "order" : null,
      org_id: held.includes(index) ? "org" : null,
    })),
  };
}

describe("capacityByModel", () => {
  test("free is not schedulable, and fragments do not add up to large shapes", () => {
    const [h100] = capacityByModel([
      node("a", "ready", [0, 1, 2]), // 5 free
      node("b", "ready", [0, 1, 2, 3]), // 4 free
      node("c", "cordoned", []), // 8 free, takes no work
      node("d", "ready", [], [7]), // 7 healthy free
    ]);
    expect(h100).toMatchObject({ model: "H100", total: 32, free: 24, schedulable: 16, largest: 7 });
    // 16 free on ready nodes, yet not one 8-GPU instance fits.
    expect(h100?.placeable).toEqual({ 1: 16, 2: 7, 4: 3, 8: 0 });
  });
});

describe("groupNodes", () => {
  test("folds ready, wholly idle nodes of one type and keeps the rest", () => {
    const [group] = groupNodes([node("a", "ready", []), node("b", "ready", []), node("c", "ready", [0]), node("d", "draining", [])]);
    expect(group?.idle).toEqual([{ instanceType: "h100x8", count: 2, gpus: 8 }]);
    expect(group?.nodes.map((n) => n.name)).toEqual(["c", "d"]);
  });
});

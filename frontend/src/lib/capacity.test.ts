import { describe, expect, test } from "vitest";
import type { Schemas } from "../api/client";
import { capacityByModel, cellOf, fraction, gpuShape, groupNodes, nodeUse, shareBackground } from "./capacity";

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
    storage: { provisioned_gib: 0, used_bytes: 0, local_volumes: [] },
    gpus: Array.from({ length: gpus }, (_, index) => ({
      index,
      model: "H100",
      hardware_uuid: `${name}-${index}`,
      memory_mib: 81920,
      nvlink_domain: 0,
      healthy: !sick.includes(index),
      mig_enabled: false,
      mig_devices: [],
      held_outside: false,
      shares: [],
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

describe("GPUs held outside Gantry", () => {
  test("are taken: neither free nor placeable, and shown as outside", () => {
    const n = node("s", "ready", []);
    for (const g of n.gpus.slice(0, 2)) g.held_outside = true;
    const [h100] = capacityByModel([n]);
    expect(h100).toMatchObject({ total: 8, free: 6, schedulable: 6, largest: 6 });
    expect(h100?.placeable[8]).toBe(0);
    expect(n.gpus[0] && cellOf(n.gpus[0])).toEqual({ kind: "outside" });
    expect(nodeUse(n).free).toBe(6);
    expect(groupNodes([n])[0]?.idle).toEqual([]);
  });
});

describe("nodeUse", () => {
  test("fractional and MIG work counts as work: its GPUs are not free and its orders are counted", () => {
    const n = node("m", "ready", [0]);
    const [, second, third] = n.gpus;
    if (!second || !third) throw new Error("the node has 8 GPUs");
    second.shares = [
      { order_id: "quarter-a", org_id: "org", units: 250, mig_device: null },
      { order_id: "quarter-b", org_id: "org", units: 250, mig_device: null },
    ];
    third.mig_enabled = true;
    third.mig_devices = Array.from({ length: 7 }, (_, i) => ({ uuid: `MIG-${i}`, profile: "1g.10gb" }));
    third.shares = [{ order_id: "slice", org_id: "org", units: 1, mig_device: "MIG-0" }];
    expect(nodeUse(n)).toEqual({ whole: 1, shared: 2, free: 5, unhealthy: 0, orders: 4, mig: { total: 7, free: 6 } });
    expect(nodeUse(node("plain", "ready", [])).mig).toBeNull();
  });
});

describe("groupNodes", () => {
  test("folds ready, wholly idle nodes of one type and keeps the rest", () => {
    const [group] = groupNodes([node("a", "ready", []), node("b", "ready", []), node("c", "ready", [0]), node("d", "draining", [])]);
    expect(group?.idle).toEqual([{ instanceType: "h100x8", count: 2, gpus: 8 }]);
    expect(group?.nodes.map((n) => n.name)).toEqual(["c", "d"]);
  });
});

describe("shared GPUs", () => {
  test("fractions read as people say them and shapes name the share", () => {
    expect(fraction(250)).toBe("¼");
    expect(fraction(875)).toBe("⅞");
    expect(fraction(300)).toBe("30%");
    expect(gpuShape({ gpus_per_node: 8, gpu_model: "H100" })).toBe("8 × H100");
    expect(gpuShape({ gpus_per_node: 1, gpu_model: "H100", gpu_milli: 500 })).toBe("½ of one H100");
    expect(gpuShape({ gpus_per_node: 1, gpu_model: "H100", mig_profile: "1g.10gb" })).toBe("MIG 1g.10gb of one H100");
  });

  test("a shared GPU is drawn by its tenants' shares and is not free for whole orders", () => {
    const shared = node("s", "ready", []);
    const gpu = shared.gpus[0]!;
    gpu.shares = [
      { order_id: "o1", org_id: "a", units: 250, mig_device: null },
      { order_id: "o2", org_id: "b", units: 500, mig_device: null },
    ];
    const cell = cellOf(gpu);
    expect(cell.kind).toBe("shared");
    if (cell.kind !== "shared") return;
    expect(cell.parts.map((p) => [p.share, p.label])).toEqual([
      [0.25, "¼"],
      [0.5, "½"],
    ]);
    const fill = shareBackground(cell.parts);
    expect(fill).toContain("0.0% 25.0%");
    expect(fill).toContain("25.0% 75.0%");
    expect(fill).toContain("transparent 75.0%");
    const mig = shared.gpus[1]!;
    mig.mig_enabled = true;
    mig.mig_devices = Array.from({ length: 7 }, (_, i) => ({ uuid: `MIG-${i}`, profile: "1g.10gb" }));
    mig.shares = [{ order_id: "o3", org_id: "a", units: 1, mig_device: "MIG-3" }];
    const migCell = cellOf(mig);
    expect(migCell.kind === "shared" && migCell.parts[0]).toMatchObject({ label: "MIG 1g.10gb" });
    const [h100] = capacityByModel([shared]);
    expect(h100?.free).toBe(6);
  });
});

import { describe, expect, it } from "vitest";
import { latest, models, tenantHours, type History } from "./trends";

const at = (minute: number) => `2026-12-04T10:0${minute}:00Z`;

function history(series: History["series"]): History {
  return { range: "hour", from: at(0), to: at(9), step_seconds: 60, interval_seconds: 60, series };
}

function hours(organization: string, values: number[]): History["series"][number] {
  return { metric: "gpu_hours", org_id: organization, organization, points: values.map((value, i) => ({ at: at(i), value })) };
}

describe("trends", () => {
  it("names the models that have capacity series, once each", () => {
    const h = history([
      { metric: "gpus_allocated", gpu_model: "L40S", points: [] },
      { metric: "gpus_free", gpu_model: "L40S", points: [] },
      { metric: "gpus_allocated", gpu_model: "H100", points: [] },
      { metric: "pending_orders", points: [] },
    ]);
    expect(models(h)).toEqual(["H100", "L40S"]);
  });

  it("reads the newest point", () => {
    expect(latest({ metric: "pending_orders", points: [{ at: at(0), value: 3 }, { at: at(1), value: 5 }] })).toBe(5);
    expect(latest({ metric: "pending_orders", points: [] })).toBeUndefined();
  });

  it("keeps the largest tenants and sums the rest per step", () => {
    const h = history([hours("a", [1, 1]), hours("b", [4, 0]), hours("c", [0.5, 0.25]), hours("d", [2, 2])]);
    const top = tenantHours(h, 2, "others");
    expect(top.map((t) => t.name)).toEqual(["b", "d", "others"]);
    expect(top.at(-1)).toEqual({
      name: "others",
      total: 2.75,
      points: [
        [at(0), 1.5],
        [at(1), 1.25],
      ],
    });
    expect(tenantHours(h, 4, "others")).toHaveLength(4);
  });

  it("puts every tenant's points at the same times, so stacked bars stack by time", () => {
    const early = { metric: "gpu_hours" as const, org_id: "x", organization: "x", points: [{ at: at(0), value: 2 }, { at: at(1), value: 2 }] };
    const late = { metric: "gpu_hours" as const, org_id: "y", organization: "y", points: [{ at: at(1), value: 1 }, { at: at(2), value: 3 }] };
    const [x, y] = tenantHours(history([early, late]), 4, "others");
    expect(x?.points).toEqual([
      [at(0), 2],
      [at(1), 2],
      [at(2), 0],
    ]);
    expect(y?.points).toEqual([
      [at(0), 0],
      [at(1), 1],
      [at(2), 3],
    ]);
  });
});

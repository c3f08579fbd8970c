import { describe, expect, test } from "vitest";
import { estimate, perGpuHour, priceInForce } from "./pricing";

const price = (over: Partial<Parameters<typeof priceInForce>[0][number]>) => ({
  id: crypto.randomUUID(),
  instance_type_id: "t",
  region: null,
  pricing_class: "on_demand" as const,
  hourly_micros: 1_000_000,
  effective_from: "2026-01-01T00:00:00Z",
  ...over,
});

describe("priceInForce", () => {
  const now = new Date("2026-06-01T00:00:00Z");
  const prices = [
    price({ hourly_micros: 10_000_000 }),
    price({ hourly_micros: 12_000_000, effective_from: "2026-05-01T00:00:00Z" }),
    price({ hourly_micros: 15_000_000, effective_from: "2026-07-01T00:00:00Z" }),
    price({ hourly_micros: 11_000_000, region: "eu-central" }),
    price({ hourly_micros: 4_000_000, pricing_class: "spot" }),
  ];

  test("takes the latest general price already in force", () => {
    expect(priceInForce(prices, "on_demand", null, now)?.hourly_micros).toBe(12_000_000);
  });

  test("prefers the region's own price", () => {
    expect(priceInForce(prices, "on_demand", "eu-central", now)?.hourly_micros).toBe(11_000_000);
    expect(priceInForce(prices, "on_demand", "us-east", now)?.hourly_micros).toBe(12_000_000);
  });

  test("keeps pricing classes apart and knows when none is offered", () => {
    expect(priceInForce(prices, "spot", null, now)?.hourly_micros).toBe(4_000_000);
    expect(priceInForce(prices, "reserved", null, now)).toBeUndefined();
  });
});

describe("estimate", () => {
  test("multiplies by nodes and prices the planned duration", () => {
    const p = price({ hourly_micros: 19_920_000 });
    expect(estimate(p, 2, null)).toEqual({ hourlyMicros: 39_840_000, totalMicros: null });
    expect(estimate(p, 1, 1800)).toEqual({ hourlyMicros: 19_920_000, totalMicros: 9_960_000 });
  });

  test("an array costs all of its members", () => {
    const p = price({ hourly_micros: 990_000 });
    expect(estimate(p, 1, 3600, 60)).toEqual({ hourlyMicros: 59_400_000, totalMicros: 59_400_000 });
    expect(estimate(p, 1, null, 0)).toBeNull();
  });

  test("has nothing to say without a price or nodes", () => {
    expect(estimate(undefined, 1, null)).toBeNull();
    expect(estimate(price({}), 0, null)).toBeNull();
  });
});

describe("price per GPU-hour", () => {
  test("whole GPUs divide by the count, shares by their share of one GPU", () => {
    expect(perGpuHour(16_000_000, { gpus_per_node: 8 })).toBe(2_000_000);
    expect(perGpuHour(500_000, { gpus_per_node: 1, gpu_milli: 250 })).toBe(2_000_000);
    // A 1g slice is one of seven.
    expect(perGpuHour(300_000, { gpus_per_node: 1, mig_profile: "1g.10gb" })).toBe(2_100_000);
    expect(perGpuHour(1_200_000, { gpus_per_node: 1, mig_profile: "3g.40gb" })).toBe(2_800_000);
  });
});

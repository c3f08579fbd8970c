// What an order will cost, from the catalog's versioned prices: the price
// in force now for its pricing class, the region's own before the general
// one, the same choice the server's rating makes.
import type { Schemas } from "../api/client";

type Price = Schemas["Price"];
type PricingClass = Schemas["PricingClass"];

export function priceInForce(
  prices: Price[],
  pricingClass: PricingClass,
  region: string | null,
  now: Date = new Date(),
): Price | undefined {
  const current = prices.filter(
    (p) => p.pricing_class === pricingClass && new Date(p.effective_from) <= now,
  );
  const latest = (candidates: Price[]) =>
    candidates.reduce<Price | undefined>(
      (best, p) => (!best || p.effective_from > best.effective_from ? p : best),
      undefined,
    );
  return (
    (region ? latest(current.filter((p) => p.region === region)) : undefined) ??
    latest(current.filter((p) => !p.region))
  );
}

export type Estimate = { hourlyMicros: number; totalMicros: number | null };

/**
 * The hourly price of `instances` orders of `nodeCount` nodes each (a job
 * array's members all run), and the total when a duration is set.
 */
export function estimate(
  price: Price | undefined,
  nodeCount: number,
  durationSeconds: number | null,
  instances = 1,
): Estimate | null {
  if (!price || nodeCount < 1 || instances < 1) return null;
  const hourlyMicros = price.hourly_micros * nodeCount * instances;
  return {
    hourlyMicros,
    totalMicros: durationSeconds ? Math.round((hourlyMicros * durationSeconds) / 3600) : null,
  };
}

/** What one GPU-hour costs on an instance type: a shared type's price is for its share of one GPU. */
export function perGpuHour(
  hourlyMicros: number,
  type: { gpus_per_node: number; gpu_milli?: number | null; mig_profile?: string | null },
  migSlices = 7,
): number {
  if (type.gpu_milli) return (hourlyMicros * 1000) / type.gpu_milli;
  if (type.mig_profile) {
    const slices = Number(/^(\d+)g\./.exec(type.mig_profile)?.[1] ?? migSlices);
    return (hourlyMicros * migSlices) / slices;
  }
  return hourlyMicros / Math.max(type.gpus_per_node, 1);
}

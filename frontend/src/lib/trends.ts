// The fleet history's series, grouped the way the operator's charts draw
// them.
import type { Schemas } from "../api/client";

export type History = Schemas["History"];
export type Series = Schemas["Series"];
export type Metric = Schemas["HistoryMetric"];
type Point = [string, number];

export function pointsOf(series: Series | undefined): Point[] {
  return (series?.points ?? []).map((p) => [p.at, p.value]);
}

/** The newest value of a series, if it has one. */
export function latest(series: Series | undefined): number | undefined {
  return series?.points.at(-1)?.value;
}

export function find(history: History, metric: Metric, gpuModel?: string): Series | undefined {
  return history.series.find((s) => s.metric === metric && (gpuModel === undefined || s.gpu_model === gpuModel));
}

/** GPU models that have capacity series, by name. */
export function models(history: History): string[] {
  const names = new Set(history.series.filter((s) => s.metric === "gpus_allocated").map((s) => s.gpu_model ?? ""));
  return [...names].filter(Boolean).sort();
}

export interface TenantHours {
  name: string;
  total: number;
  points: Point[];
}

/**
 * GPU-hours per organization, the `top` largest over the range by name and
 * the rest summed as one entry named `others`.
 */
export function tenantHours(history: History, top: number, others: string): TenantHours[] {
  const tenants = history.series
    .filter((s) => s.metric === "gpu_hours")
    .map((s) => ({
      name: s.organization ?? s.org_id ?? "",
      total: s.points.reduce((sum, p) => sum + p.value, 0),
      points: pointsOf(s),
    }))
    .sort((a, b) => b.total - a.total || a.name.localeCompare(b.name));
  if (tenants.length <= top) return aligned(tenants);
  const rest = new Map<string, number>();
  for (const tenant of tenants.slice(top)) {
    for (const [at, value] of tenant.points) rest.set(at, (rest.get(at) ?? 0) + value);
  }
  const points = [...rest.entries()].sort(([a], [b]) => a.localeCompare(b));
  return aligned([...tenants.slice(0, top), { name: others, total: points.reduce((sum, [, v]) => sum + v, 0), points }]);
}

/**
 * Every tenant's points at the same times, zero where it had none: a
 * stacked chart stacks the n-th point of each series, so series with gaps
 * at different times would stack one tenant's bar on another's at the
 * wrong time.
 */
function aligned(tenants: TenantHours[]): TenantHours[] {
  const times = [...new Set(tenants.flatMap((tenant) => tenant.points.map(([at]) => at)))].sort();
  return tenants.map((tenant) => {
    const values = new Map(tenant.points);
    return { ...tenant, points: times.map((at): Point => [at, values.get(at) ?? 0]) };
  });
}

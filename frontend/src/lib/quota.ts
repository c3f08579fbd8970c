// Whether an order fits the organization's quota before it is submitted:
// a quota's maximum bounds the GPUs of a model its orders hold at once.
import type { Schemas } from "../api/client";

type Quota = Schemas["Quota"];

export type QuotaCheck =
  | { kind: "unlimited" }
  | { kind: "fits"; used: number; max: number; after: number }
  | { kind: "waits"; used: number; max: number; after: number }
  | { kind: "never"; max: number; requested: number };

export function checkQuota(
  quotas: Quota[],
  gpuModel: string,
  region: string | null,
  requestedGpus: number,
): QuotaCheck {
  const binding = quotas.filter(
    (q) =>
      q.gpu_model === gpuModel &&
      !q.project_id &&
      q.max_gpus !== null &&
      q.max_gpus !== undefined &&
      (!q.region || q.region === region),
  );
  if (binding.length === 0) return { kind: "unlimited" };
  // The tightest quota decides.
  const tightest = binding.reduce((a, b) =>
    (a.max_gpus ?? 0) - a.used_gpus <= (b.max_gpus ?? 0) - b.used_gpus ? a : b,
  );
  const max = tightest.max_gpus ?? 0;
  const used = tightest.used_gpus;
  if (requestedGpus > max) return { kind: "never", max, requested: requestedGpus };
  const after = used + requestedGpus;
  return after <= max ? { kind: "fits", used, max, after } : { kind: "waits", used, max, after };
}

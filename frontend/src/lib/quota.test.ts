import { describe, expect, test } from "vitest";
import { checkQuota } from "./quota";

const quota = (over: Partial<Parameters<typeof checkQuota>[0][number]>) => ({
  gpu_model: "H100",
  region: null,
  project_id: null,
  guaranteed_gpus: 0,
  max_gpus: 16,
  used_gpus: 8,
  ...over,
});

describe("checkQuota", () => {
  test("fits, waits or can never run", () => {
    expect(checkQuota([quota({})], "H100", null, 8)).toEqual({ kind: "fits", used: 8, max: 16, after: 16 });
    expect(checkQuota([quota({})], "H100", null, 16)).toEqual({ kind: "waits", used: 8, max: 16, after: 24 });
    expect(checkQuota([quota({})], "H100", null, 24)).toEqual({ kind: "never", max: 16, requested: 24 });
  });

  test("other models, project quotas and quotas without a maximum do not bind", () => {
    const quotas = [quota({ gpu_model: "L40S" }), quota({ project_id: "p", max_gpus: 1 }), quota({ max_gpus: null })];
    expect(checkQuota(quotas, "H100", null, 8)).toEqual({ kind: "unlimited" });
  });

  test("a regional quota binds only orders pinned to its region, and the tightest decides", () => {
    const quotas = [quota({ max_gpus: 64, used_gpus: 0 }), quota({ region: "eu-central", max_gpus: 8, used_gpus: 4 })];
    expect(checkQuota(quotas, "H100", null, 8).kind).toBe("fits");
    expect(checkQuota(quotas, "H100", "eu-central", 8)).toEqual({ kind: "waits", used: 4, max: 8, after: 12 });
  });
});

import { describe, expect, test } from "vitest";
import { gpuCount } from "./orders";

describe("gpuCount", () => {
  test("counts a share as the part of its GPU it is", () => {
    expect(gpuCount({ gpus_per_node: 8, node_count: 2, gpu_milli: null, mig_profile: null })).toBe(16);
    expect(gpuCount({ gpus_per_node: 1, node_count: 1, gpu_milli: 250, mig_profile: null })).toBe(0.25);
    expect(gpuCount({ gpus_per_node: 1, node_count: 1, gpu_milli: null, mig_profile: "1g.10gb" })).toBe(0.14);
    expect(gpuCount({ gpus_per_node: 1, node_count: 1, gpu_milli: null, mig_profile: "3g.40gb" })).toBe(0.43);
  });
});

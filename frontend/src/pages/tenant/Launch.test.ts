import { describe, expect, test } from "vitest";
import { jobOf, portsOf, type Values } from "./Launch";

const values: Values = {
  kind: "job",
  command: "python train.py",
  args: "--lr\n 0.1 \n\n",
  env: "EPOCHS=3\nTOKEN=a=b",
  secrets: [{ name: "HF_TOKEN", value: "hf_x" }],
  workingDir: " /workspace ",
  walltimeMinutes: 90,
  retryOnFailure: true,
  maxRetries: 2,
  arrayCount: 50,
  dependsOn: "01a2, 01b3",
  dependencyCondition: "after_any",
  instanceType: "h100x1",
  nodeCount: 1,
  region: "",
  pricingClass: "on_demand",
  priorityClass: "standard",
  workloadClass: "training",
  durationHours: "",
  checkpointable: false,
  image: "",
  sshKeyIds: [],
  ports: "",
  reservationId: "",
  name: "",
  volumes: [],
};

describe("jobOf", () => {
  test("turns the form's text fields into the job section", () => {
    expect(jobOf(values)).toEqual({
      command: "python train.py",
      args: ["--lr", "0.1"],
      env: { EPOCHS: "3", TOKEN: "a=b" },
      secret_env: { HF_TOKEN: "hf_x" },
      working_dir: "/workspace",
      max_runtime_seconds: 5400,
      retry: { on_failure: true, max_retries: 2 },
      depends_on: [
        { order_id: "01a2", condition: "after_any" },
        { order_id: "01b3", condition: "after_any" },
      ],
      array_count: 50,
    });
  });

  test("leaves out what was left empty", () => {
    const job = jobOf({ ...values, args: "", env: "", secrets: [], workingDir: "", walltimeMinutes: "", arrayCount: "", dependsOn: "" });
    expect(job).toMatchObject({ args: [], env: {}, secret_env: {}, working_dir: null, max_runtime_seconds: null, depends_on: [], array_count: null });
  });
});

describe("portsOf", () => {
  test("reads ports separated by commas or spaces, and nothing as null", () => {
    expect(portsOf("8888, 6006 7860")).toEqual([8888, 6006, 7860]);
    expect(portsOf("  ")).toBeNull();
    expect(portsOf("x")).toEqual([Number.NaN]);
  });
});

import { describe, expect, test } from "vitest";
import { reasonText } from "./WaitReasons";

describe("reasonText", () => {
  test("an order held to its volume's node says so, and what stops the node", () => {
    const pinned = (node_state: "ready" | "cordoned" | "unhealthy") =>
      reasonText("org", { kind: "pinned_by_volume", volume: "ckpt", node: "gpu-7", node_state });
    expect(pinned("ready")).toBe("Its volume ckpt lives on node gpu-7: it runs there only, and waits for that node.");
    expect(pinned("cordoned")).toBe(
      "Its volume ckpt lives on node gpu-7: it runs there only, and waits for that node. gpu-7 takes no new work now (cordoned).",
    );
    expect(pinned("unhealthy")).toContain("gpu-7 is not answering; it starts once the node is back.");
  });
});

import { describe, expect, test } from "vitest";
import { daysOf } from "./Usage";

describe("usage chart", () => {
  test("a 30-day range has a bar for every day, used or not", () => {
    const days = daysOf({ from: "2026-11-04T00:00:00.000Z", to: "2026-12-04T10:00:00.000Z" });
    expect(days).toHaveLength(31);
    expect(days[0]).toBe("2026-11-04");
    expect(days.at(-1)).toBe("2026-12-04");
    expect(new Set(days).size).toBe(days.length);
  });
});

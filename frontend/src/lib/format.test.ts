import { describe, expect, test } from "vitest";
import { duration, gpuHours, words } from "./format";

describe("format", () => {
  test("durations read at the right scale", () => {
    expect(duration(42)).toBe("42 s");
    expect(duration(3725)).toBe("1 h 2 min");
    expect(duration(7200)).toBe("2 h");
    expect(duration(90_000)).toBe("1 d 1 h");
  });

  test("GPU-seconds as GPU-hours, enum values as words", () => {
    expect(gpuHours(5400)).toMatch(/^1[.,]5$/);
    expect(words("fine_tuning")).toBe("fine tuning");
    expect(words(null)).toBe("—");
  });
});

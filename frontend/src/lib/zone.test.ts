import { describe, expect, test } from "vitest";
import { instantOf, instantOfInput, offsetAt, utcOffset, wallOf, zoneLabel } from "./zone";

describe("wall-clock time in a zone", () => {
  test("an instant reads as the zone's day and hour", () => {
    expect(wallOf("2026-12-06T16:00:00Z", "Asia/Seoul")).toEqual({ day: "2026-12-07", hour: 1, minute: 0 });
    expect(wallOf("2026-12-06T16:00:00Z", "America/New_York")).toEqual({ day: "2026-12-06", hour: 11, minute: 0 });
  });

  test("a day and hour in a zone name one instant, across the change of clocks too", () => {
    expect(instantOf("2026-12-07", 1, 0, "Asia/Seoul")).toBe("2026-12-06T16:00:00Z");
    expect(instantOf("2026-07-01", 9, 0, "America/New_York")).toBe("2026-07-01T13:00:00Z");
    expect(instantOf("2026-12-01", 9, 0, "America/New_York")).toBe("2026-12-01T14:00:00Z");
    // New York's clocks go from 02:00 to 03:00 on 8 March 2026: the morning after, EDT holds.
    expect(instantOf("2026-03-08", 3, 0, "America/New_York")).toBe("2026-03-08T07:00:00Z");
    expect(instantOf("2026-03-07", 23, 0, "America/New_York")).toBe("2026-03-08T04:00:00Z");
    expect(instantOf("2026-12-06", 0, 0, "UTC")).toBe("2026-12-06T00:00:00Z");
    expect(instantOfInput("2026-12-07T01:30", "Asia/Seoul")).toBe("2026-12-06T16:30:00Z");
    expect(instantOfInput("2026-12-07", "Asia/Seoul")).toBeNull();
  });

  test("offsets read as people write them", () => {
    expect(utcOffset(offsetAt(Date.parse("2026-12-06T00:00:00Z"), "Asia/Seoul"))).toBe("UTC+9");
    expect(utcOffset(offsetAt(Date.parse("2026-12-06T00:00:00Z"), "America/St_Johns"))).toBe("UTC−3:30");
    expect(zoneLabel("UTC")).toBe("UTC");
    expect(zoneLabel("Asia/Seoul")).toBe("Asia/Seoul (UTC+9)");
  });
});

import { describe, expect, test } from "vitest";
import { dayRows, fitOf } from "./calendar";

describe("dayRows", () => {
  test("puts each hour under its day in the zone and leaves earlier hours empty", () => {
    const slots = ["2027-01-04T22:00:00Z", "2027-01-04T23:00:00Z", "2027-01-05T00:00:00Z"].map((starts_at, i) => ({
      starts_at,
      instances: i,
    }));
    const rows = dayRows(slots, "UTC");
    expect(rows.map((r) => r.day)).toEqual(["2027-01-04", "2027-01-05"]);
    const [first, second] = rows;
    expect(first?.cells.slice(0, 22).every((c) => c === null)).toBe(true);
    expect(first?.cells[23]?.slot.instances).toBe(1);
    expect(second?.cells[0]?.startsAt).toBe("2027-01-05T00:00:00Z");
    expect(second?.cells[1]).toBeNull();
  });

  test("in Seoul the same hours fall on the next morning", () => {
    const rows = dayRows([{ starts_at: "2027-01-04T22:00:00Z" }, { starts_at: "2027-01-05T00:00:00Z" }], "Asia/Seoul");
    expect(rows.map((r) => r.day)).toEqual(["2027-01-05"]);
    expect(rows[0]?.cells[7]?.startsAt).toBe("2027-01-04T22:00:00Z");
    expect(rows[0]?.cells[9]?.startsAt).toBe("2027-01-05T00:00:00Z");
  });

  test("judges free instances against the count wanted", () => {
    expect(fitOf(3, 2)).toBe("fits");
    expect(fitOf(1, 2)).toBe("short");
    expect(fitOf(0, 1)).toBe("none");
  });
});

import { describe, expect, test } from "vitest";
import { lastMonth } from "./OrgInvoices";

describe("operator invoices", () => {
  test("last month is the whole calendar month before this one, in UTC", () => {
    expect(lastMonth(new Date("2026-12-04T10:00:00Z"))).toEqual({
      period_start: "2026-11-01T00:00:00.000Z",
      period_end: "2026-12-01T00:00:00.000Z",
    });
    expect(lastMonth(new Date("2027-01-01T00:30:00Z")).period_start).toBe("2026-12-01T00:00:00.000Z");
  });
});

import { describe, expect, test } from "vitest";
import { i18n } from "../i18n";
import { billingPeriod, dateTime, duration, gpuHours, money, shortId, words } from "./format";

describe("format", () => {
  test("Korean reads numbers, durations and words its own way", async () => {
    await i18n.changeLanguage("ko");
    try {
      expect(duration(3725)).toBe("1시간 2분");
      expect(words("running")).toBe("실행 중");
      expect(money(1_500_000)).toMatch(/US\$1\.50|\$1\.50/);
    } finally {
      await i18n.changeLanguage("en");
    }
  });

  test("durations read at the right scale", () => {
    expect(duration(42)).toBe("42 s");
    expect(duration(3725)).toBe("1 h 2 min");
    expect(duration(7200)).toBe("2 h");
    expect(duration(90_000)).toBe("1 d 1 h");
  });

  test("ids made in the same minute read differently; times carry their zone", () => {
    expect(shortId("01a24056-490a-717a-984b-fe7e4663965b")).toBe("4663965b");
    expect(shortId("01a24056-490a-717a-984b-0a1b2c3d4e5f")).not.toBe(shortId("01a24056-490a-717a-984b-fe7e4663965b"));
    expect(dateTime("2026-12-04T09:30:00Z")).toMatch(/UTC|GMT|[A-Z]{2,5}|[+-]\d/);
    expect(dateTime(null)).toBe("—");
  });

  test("GPU-seconds as GPU-hours, enum values as words", () => {
    expect(gpuHours(5400)).toMatch(/^1[.,]5$/);
    expect(words("fine_tuning")).toBe("fine-tuning");
    expect(words("not_yet_translated")).toBe("not yet translated");
    expect(words(null)).toBe("—");
  });

  test("a billing period reads as its UTC days, the exclusive end left out", () => {
    // Intl puts thin spaces around the dash.
    const plain = (text: string) => text.replace(/\s/g, " ");
    expect(plain(billingPeriod("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"))).toBe("Nov 1 – 30, 2026 (UTC)");
    expect(plain(billingPeriod("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))).toBe("Dec 1 – 31, 2026 (UTC)");
  });

  test("money keeps its sign and never reads minus zero", () => {
    expect(money(-2_500_000)).toBe("-$2.50");
    expect(money(0)).toBe("$0.00");
  });
});

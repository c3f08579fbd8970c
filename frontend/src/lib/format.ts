// Numbers, money, dates and durations in the reader's language and time
// zone.
import { i18n } from "../i18n";
import { preferences } from "./preferences";

function locale(): string {
  return i18n.language || "en";
}

function timeZone(): string | undefined {
  return preferences().timeZone;
}

const MICROS = 1_000_000;

export function money(micros: number, currency = "USD"): string {
  return new Intl.NumberFormat(locale(), {
    style: "currency",
    currency,
    minimumFractionDigits: 2,
    maximumFractionDigits: micros !== 0 && Math.abs(micros) < 10_000 ? 4 : 2,
  }).format(micros / MICROS);
}

/**
 * A billing period as days: periods are whole UTC months with an exclusive
 * end, so Nov 1 00:00 to Dec 1 00:00 UTC reads "Nov 1 – 30, 2026 (UTC)"
 * in every reader's zone.
 */
export function billingPeriod(start: string, end: string): string {
  const last = new Date(Math.max(Date.parse(start), Date.parse(end) - 1));
  const range = new Intl.DateTimeFormat(locale(), { dateStyle: "medium", timeZone: "UTC" }).formatRange(new Date(start), last);
  return `${range} (UTC)`;
}

/** A moment with its time zone, such as "Dec 4, 2026, 09:30 UTC". */
export function dateTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  return new Intl.DateTimeFormat(locale(), {
    timeZone: timeZone(),
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    timeZoneName: "short",
  }).format(new Date(iso));
}

/**
 * The part of a UUIDv7 that tells ids apart: its last 8 hex digits are
 * random, while its first ones are the time it was made.
 */
export function shortId(id: string): string {
  return id.slice(-8);
}

export function date(iso: string | null | undefined): string {
  if (!iso) return "—";
  return new Intl.DateTimeFormat(locale(), { dateStyle: "medium", timeZone: timeZone() }).format(new Date(iso));
}

/** 3725 → "1 h 2 min"; under a minute in seconds. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return i18n.t("duration.seconds", { count: s });
  const days = Math.floor(s / 86_400);
  const hours = Math.floor((s % 86_400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const d = i18n.t("duration.days", { count: days });
  const h = i18n.t("duration.hours", { count: hours });
  const m = i18n.t("duration.minutes", { count: minutes });
  if (days > 0) return hours > 0 ? `${d} ${h}` : d;
  if (hours > 0) return minutes > 0 ? `${h} ${m}` : h;
  return m;
}

export function gpuHours(gpuSeconds: number): string {
  return new Intl.NumberFormat(locale(), { maximumFractionDigits: 2 }).format(gpuSeconds / 3600);
}

/** Basis points of a percent (permyriad) as a percentage: 9990 → "99.90 %". */
export function permyriad(value: number): string {
  return `${new Intl.NumberFormat(locale(), { minimumFractionDigits: 2, maximumFractionDigits: 3 }).format(value / 100)} %`;
}

export function number(value: number): string {
  return new Intl.NumberFormat(locale()).format(value);
}

/** Bytes in GiB, to two decimals, in the reader's language. */
export function gib(bytes: number): string {
  return number(Math.round((bytes / 1024 ** 3) * 100) / 100);
}

/** An API enum value in the reader's words: "on_demand" → "on demand", "온디맨드". */
export function words(value: string | null | undefined): string {
  if (!value) return "—";
  return i18n.t(`enum.${value}`, { defaultValue: value.replaceAll("_", " ") });
}

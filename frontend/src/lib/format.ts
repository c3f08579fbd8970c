// Numbers, money, dates and durations in the user's locale and time zone.

const MICROS = 1_000_000;

export function money(micros: number, currency = "USD"): string {
  return new Intl.NumberFormat(undefined, {
    style: "currency",
    currency,
    minimumFractionDigits: 2,
    maximumFractionDigits: micros !== 0 && Math.abs(micros) < 10_000 ? 4 : 2,
  }).format(micros / MICROS);
}

/** A moment with its time zone, such as "Dec 4, 2026, 09:30 UTC". */
export function dateTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  return new Intl.DateTimeFormat(undefined, {
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
  return new Intl.DateTimeFormat(undefined, { dateStyle: "medium" }).format(new Date(iso));
}

/** 3725 → "1 h 2 min"; under a minute in seconds. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const days = Math.floor(s / 86_400);
  const hours = Math.floor((s % 86_400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  if (days > 0) return hours > 0 ? `${days} d ${hours} h` : `${days} d`;
  if (hours > 0) return minutes > 0 ? `${hours} h ${minutes} min` : `${hours} h`;
  return `${minutes} min`;
}

export function gpuHours(gpuSeconds: number): string {
  return new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 }).format(gpuSeconds / 3600);
}

/** Basis points of a percent (permyriad) as a percentage: 9990 → "99.90 %". */
export function permyriad(value: number): string {
  return `${new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 3 }).format(value / 100)} %`;
}

export function number(value: number): string {
  return new Intl.NumberFormat().format(value);
}

/** snake_case enum values as words: "on_demand" → "on demand". */
export function words(value: string | null | undefined): string {
  return value ? value.replaceAll("_", " ") : "—";
}

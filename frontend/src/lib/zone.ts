// Wall-clock time in the reader's zone (the one on their account, else the
// browser's): the days and hours that forms and calendars show, and the
// instant a chosen day and hour names there.
import { preferences } from "./preferences";

export function readerZone(): string {
  const zone = preferences().timeZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone;
  // UTC has several names; people know one.
  return /^(Etc\/)?(UTC|UCT|GMT|Universal|Zulu|Greenwich)$/.test(zone) ? "UTC" : zone;
}

export type Wall = { day: string; hour: number; minute: number };

/** `iso` as a day (`YYYY-MM-DD`), hour and minute on `zone`'s clock. */
export function wallOf(iso: string, zone = readerZone()): Wall {
  const parts = new Map(
    new Intl.DateTimeFormat("en-CA", {
      timeZone: zone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    })
      .formatToParts(new Date(iso))
      .map((p) => [p.type, p.value]),
  );
  return { day: `${parts.get("year")}-${parts.get("month")}-${parts.get("day")}`, hour: Number(parts.get("hour")), minute: Number(parts.get("minute")) };
}

/** How far `zone`'s clock is ahead of UTC at the instant `ms`, in milliseconds. */
export function offsetAt(ms: number, zone = readerZone()): number {
  const wall = wallOf(new Date(ms).toISOString(), zone);
  const [year = 1970, month = 1, day = 1] = wall.day.split("-").map(Number);
  return Date.UTC(year, month - 1, day, wall.hour, wall.minute) - Math.floor(ms / 60_000) * 60_000;
}

/**
 * The instant that `day` at `hour`:`minute` names on `zone`'s clock, as the
 * API writes times. An hour the clock skips moves forward by the jump.
 */
export function instantOf(day: string, hour: number, minute = 0, zone = readerZone()): string {
  const [year = 1970, month = 1, date = 1] = day.split("-").map(Number);
  const wall = Date.UTC(year, month - 1, date, hour, minute);
  // The offset at the guess may differ from the offset at the answer
  // across a change of clocks: a second step settles it.
  const first = wall - offsetAt(wall, zone);
  const at = wall - offsetAt(first, zone);
  return new Date(at).toISOString().replace(".000Z", "Z");
}

/** A `datetime-local` input's value (`YYYY-MM-DDTHH:MM`, the reader's clock) as an instant; null when incomplete. */
export function instantOfInput(value: string, zone = readerZone()): string | null {
  const parts = /^(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2})$/.exec(value);
  return parts ? instantOf(parts[1] ?? "", Number(parts[2]), Number(parts[3]), zone) : null;
}

/** An offset from UTC as people write it: `UTC`, `UTC+9`, `UTC−4:30`. */
export function utcOffset(ms: number): string {
  if (ms === 0) return "UTC";
  const minutes = Math.abs(ms) / 60_000;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return `UTC${ms > 0 ? "+" : "−"}${hours}${rest ? `:${String(rest).padStart(2, "0")}` : ""}`;
}

/** The zone's name with its offset now, such as `Asia/Seoul (UTC+9)`. */
export function zoneLabel(zone = readerZone(), at = Date.now()): string {
  const offset = utcOffset(offsetAt(at, zone));
  return offset === zone ? zone : `${zone} (${offset})`;
}

// Hourly slots laid out as a calendar: one row per day in the reader's
// zone, one column per hour of its clock, with the hours before the first
// slot left empty.
import { readerZone, wallOf } from "./zone";

export type HourCell<T> = { startsAt: string; hour: number; slot: T } | null;
export type DayRow<T> = { day: string; cells: HourCell<T>[] };

export function dayRows<T extends { starts_at: string }>(slots: T[], zone = readerZone()): DayRow<T>[] {
  const rows: DayRow<T>[] = [];
  for (const slot of slots) {
    const { day, hour } = wallOf(slot.starts_at, zone);
    let row = rows[rows.length - 1];
    if (!row || row.day !== day) {
      row = { day, cells: Array.from({ length: 24 }, () => null) };
      rows.push(row);
    }
    row.cells[hour] = { startsAt: slot.starts_at, hour, slot };
  }
  return rows;
}

/** How a count of free instances reads against the count wanted. */
export function fitOf(free: number, wanted: number): "fits" | "short" | "none" {
  if (free >= wanted) return "fits";
  return free > 0 ? "short" : "none";
}

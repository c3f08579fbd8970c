// Hourly slots laid out as a calendar: one row per day (UTC), one column
// per hour, with the hours before the first slot left empty.

export type HourCell<T> = { startsAt: string; hour: number; slot: T } | null;
export type DayRow<T> = { day: string; cells: HourCell<T>[] };

export function dayRows<T extends { starts_at: string }>(slots: T[]): DayRow<T>[] {
  const rows: DayRow<T>[] = [];
  for (const slot of slots) {
    const at = new Date(slot.starts_at);
    const day = slot.starts_at.slice(0, 10);
    let row = rows[rows.length - 1];
    if (!row || row.day !== day) {
      row = { day, cells: Array.from({ length: 24 }, () => null) };
      rows.push(row);
    }
    const hour = at.getUTCHours();
    row.cells[hour] = { startsAt: slot.starts_at, hour, slot };
  }
  return rows;
}

/** How a count of free instances reads against the count wanted. */
export function fitOf(free: number, wanted: number): "fits" | "short" | "none" {
  if (free >= wanted) return "fits";
  return free > 0 ? "short" : "none";
}

import { Table } from "@mantine/core";
import type { ReactNode } from "react";
import { dayRows } from "../lib/calendar";
import classes from "./HourGrid.module.css";
import { i18n } from "../i18n";

const HOURS = Array.from({ length: 24 }, (_, h) => h);

export function hourLabel(hour: number): string {
  return `${String(hour).padStart(2, "0")}:00`;
}

/** Hourly slots as a calendar: a row per day, a column per hour, in the reader's zone. */
export function HourGrid<T extends { starts_at: string }>({
  slots,
  label,
  cell,
}: {
  slots: T[];
  label: string;
  cell: (slot: T, day: string, hour: number) => ReactNode;
}) {
  return (
    <Table.ScrollContainer minWidth={820}>
      <table className={classes.calendar} aria-label={label}>
        <thead>
          <tr>
            <th scope="col">{i18n.t("shape.day")}</th>
            {HOURS.map((h) => (
              <th key={h} scope="col">
                {String(h).padStart(2, "0")}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {dayRows(slots).map((row) => (
            <tr key={row.day}>
              <th scope="row">{row.day.slice(5)}</th>
              {row.cells.map((c, hour) => (
                <td key={hour}>{c && cell(c.slot, row.day, hour)}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </Table.ScrollContainer>
  );
}

export const hourGridClasses = classes;

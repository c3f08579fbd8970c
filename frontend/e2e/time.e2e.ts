// One zone everywhere, the user's: with the browser in Seoul and the
// account set to New York, every date the tenant's pages show is New York
// time, checked against the API's own values, and the reservation form
// reads and writes New York's clock.
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { apiCall, apiSignUp, browserSuite, signIn, until } from "./harness";

const IVY = { name: "Ivy", email: "ivy@example.com", organization: "India Imaging", password: "india imaging passphrase" };
const ZONE = "America/New_York";

const suite = browserSuite();

/** A moment as the console writes it, on New York's clock. */
function newYork(iso: string): string {
  return new Intl.DateTimeFormat("en", {
    timeZone: ZONE,
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    timeZoneName: "short",
  }).format(new Date(iso));
}

/** Every time-of-day the page shows with a zone name. */
async function shownTimes(page: Page): Promise<string[]> {
  const text = await page.locator("main").innerText();
  return [...text.matchAll(/\d{1,2}:\d{2}\s?(?:AM|PM)?\s?(?:[A-Z]{2,5}|GMT[+−-]\d+)/g)].map((m) => m[0]);
}


describe("time zones", () => {
  test("in a Seoul browser with the account in New York, every date is New York time", async () => {
    const { org, token } = await apiSignUp(suite.server, IVY);
    await apiCall(suite.server, token, "PATCH", "/me", { time_zone: ZONE });
    const order = await apiCall<{ id: string }>(suite.server, token, "POST", `/orgs/${org}/orders`, { instance_type: "h100x1" });
    await until("the order runs", async () => (await apiCall<{ status: string }>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`)).status === "running");
    const start = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000 + 26 * 3_600_000).toISOString().replace(".000Z", "Z");
    const end = new Date(Date.parse(start) + 4 * 3_600_000).toISOString().replace(".000Z", "Z");
    const reservation = await apiCall<{ starts_at: string; ends_at: string }>(suite.server, token, "POST", `/orgs/${org}/reservations`, {
      name: "zone check",
      instance_type: "h100x8",
      count: 1,
      region: "us-east",
      starts_at: start,
      ends_at: end,
    });

    const { page } = await suite.session(undefined, { timezoneId: "Asia/Seoul", locale: "en-US" });
    expect(await page.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone)).toBe("Asia/Seoul");
    await signIn(page, IVY);
    await page.getByRole("heading", { name: "Overview" }).waitFor();

    const detail = await apiCall<{ created_at: string; started_at: string }>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`);
    const pages: [string, string, string[]][] = [
      ["overview", `/orgs/${org}`, []],
      ["orders", `/orgs/${org}/orders`, [newYork(detail.created_at)]],
      ["order", `/orgs/${org}/orders/${order.id}`, [newYork(detail.created_at), newYork(detail.started_at)]],
      ["reservations", `/orgs/${org}/reservations`, [newYork(reservation.starts_at), newYork(reservation.ends_at)]],
      ["invoices", `/orgs/${org}/invoices`, []],
      ["settings", `/orgs/${org}/settings`, []],
    ];
    for (const [name, path, expected] of pages) {
      await page.goto(path);
      await page.locator("main h2").first().waitFor();
      await expect.poll(() => page.locator("main .mantine-Loader-root:visible").count(), { timeout: 15_000 }).toBe(0);
      const text = await page.locator("main").innerText();
      for (const value of expected) expect(text, `${name} shows ${value}`).toContain(value);
      const times = await shownTimes(page);
      expect(
        times.filter((t) => !/\b(EST|EDT)$/.test(t)),
        `${name}: every time is New York's`,
      ).toEqual([]);
    }

    // The reservation form speaks New York's clock: an hour picked in the
    // grid is New York's, and the quote starts at that very instant.
    await page.goto(`/orgs/${org}/reservations`);
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x8 / }).click();
    await page.getByRole("combobox", { name: "Region" }).click();
    await page.getByRole("option", { name: /\(us-east\)$/ }).click();
    await page.getByText(/for the next \d+ days, in America\/New_York \(UTC−[45]\)/).waitFor();
    const grid = page.getByRole("table", { name: /^Instances free to reserve, by hour \(America\/New_York \(UTC−[45]\)\)$/ });
    const slots = grid.getByRole("button", { name: / America\/New_York: [1-9]\d* free$/ });
    await expect.poll(() => slots.count()).toBeGreaterThan(24);
    const label = (await slots.nth(5).getAttribute("aria-label")) ?? "";
    const [day = "", hour = ""] = label.split(" ");
    await slots.nth(5).click();
    expect(await page.getByRole("combobox", { name: /^Start hour \(America\/New_York/ }).inputValue()).toBe(hour);
    // The instant that is that day and hour in New York, found by Intl alone.
    const wall = Date.UTC(Number(day.slice(0, 4)), Number(day.slice(5, 7)) - 1, Number(day.slice(8, 10)), Number(hour.slice(0, 2)));
    const instant = [...Array(25).keys()]
      .map((k) => new Date(wall + (k - 12) * 3_600_000).toISOString())
      .find((candidate) => {
        const parts = new Intl.DateTimeFormat("en-CA", { timeZone: ZONE, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", hourCycle: "h23" }).format(new Date(candidate));
        return parts.replace(",", "") === `${day} ${hour.slice(0, 2)}`;
      });
    expect(instant, `an instant for ${day} ${hour} in New York`).toBeDefined();
    await page.getByTestId("reservation-available").waitFor();
    expect(await page.getByRole("main").innerText()).toContain(newYork(instant ?? ""));
  });
});

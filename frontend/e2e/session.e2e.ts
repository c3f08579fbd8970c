// Sessions that outlive their access tokens: with a four-second token, a
// signed-in user keeps working across expiries and reloads (renewed from
// the httpOnly refresh cookie), a session ended on the server sends the
// user to sign in once (never a `next` inside a `next`) and back to the page
// they were on, and signing out ends the session on the server.
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { accessible, apiSignUp, apiToken, launchBrowser, openSession, screenshot, type Server, signIn, startServer } from "./harness";

const TENANT = { email: "tenant@demo.gantry.dev", password: "gantry tenant demo" };
const TOKEN_SECONDS = 4;

let server: Server;
let browser: Browser;

beforeAll(async () => {
  server = await startServer({ GANTRY_JWT_TTL_SECONDS: String(TOKEN_SECONDS) });
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Changes the user's password through the API, which revokes every refresh
 * token of the user; the tests go on with the new one.
 */
async function endEverySession(who: { email: string; password: string }) {
  const token = await apiToken(server, who);
  const next = "violet harbor lantern 73";
  const answer = await fetch(`${server.url}/api/v1/me/password`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ current_password: who.password, new_password: next }),
  });
  expect(answer.status, await answer.text()).toBe(204);
  who.password = next;
}

describe("a session", () => {
  test("outlives its access tokens, ends when it cannot be renewed, and comes back to the page", async () => {
    const { context, page, problems } = await openSession(browser, server);
    await signIn(page, TENANT);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    const cookies = await context.cookies();
    const refresh = cookies.find((c) => c.name === "gantry_refresh");
    expect(refresh).toMatchObject({ httpOnly: true, sameSite: "Strict", path: "/api/v1/auth" });
    expect(await page.evaluate(() => document.cookie)).not.toContain("gantry_refresh");

    // Past two token lifetimes: moving on and reloading keep the session.
    await wait((TOKEN_SECONDS + 1) * 1000);
    await page.getByRole("link", { name: "Orders", exact: true }).click();
    await page.getByRole("heading", { name: "Orders", exact: true }).waitFor();
    await wait((TOKEN_SECONDS + 1) * 1000);
    const ordersUrl = page.url();
    await page.reload();
    await page.getByRole("heading", { name: "Orders", exact: true }).waitFor();
    expect(page.url()).toBe(ordersUrl);

    // Every session of the user ended on the server (a password change
    // elsewhere signs out everywhere): once the token runs out, the user
    // signs in again, once, and is back. A renewal this page had in flight
    // cannot bring the session back, as it could after clearing only this
    // browser's cookie.
    await endEverySession(TENANT);
    await wait((TOKEN_SECONDS + 1) * 1000);
    await page.getByRole("link", { name: "Usage", exact: true }).click();
    await page.getByText("Your session expired").waitFor();
    await screenshot(page, "session-expired");
    const next = new URL(page.url()).searchParams.get("next") ?? "";
    expect(next, page.url()).toMatch(/^\/orgs\/[0-9a-f-]+\//);
    expect(next).not.toContain("sign-in");
    await page.getByRole("textbox", { name: "Email", exact: true }).fill(TENANT.email);
    await page.getByRole("textbox", { name: "Password", exact: true }).fill(TENANT.password);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => new URL(page.url()).pathname).toBe(next.split("?")[0]);

    // Signing out revokes the session on the server: the cookie it leaves
    // behind (kept aside here) no longer renews anything.
    const kept = (await context.cookies()).find((c) => c.name === "gantry_refresh");
    expect(kept).toBeDefined();
    await page.getByRole("button", { name: "Account" }).click();
    await page.getByRole("menuitem", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in" }).waitFor();
    const renewed = await fetch(`${server.url}/api/v1/auth/refresh`, {
      method: "POST",
      headers: { cookie: `gantry_refresh=${kept?.value ?? ""}` },
    });
    expect(renewed.status).toBe(401);
    await page.goto(ordersUrl);
    await expect.poll(() => new URL(page.url()).pathname).toBe("/sign-in");
    expect(new URL(page.url()).searchParams.get("next")).toBe(new URL(ordersUrl).pathname);
    expect(problems).toEqual([]);
  });

  test("at 390 px the account menu is on screen, signs out, and the orders page fits", async () => {
    const { page, problems } = await openSession(browser, server, { width: 390, height: 844 });
    await signIn(page, TENANT);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    const account = page.getByRole("button", { name: "Account" });
    const box = await account.boundingBox();
    expect(box && box.x >= 0 && box.x + box.width <= 390).toBe(true);
    await page.getByRole("button", { name: "Toggle navigation" }).click();
    await page.getByRole("link", { name: "Orders", exact: true }).click();
    await page.getByRole("heading", { name: "Orders", exact: true }).waitFor();
    // The navigation slides away after the move.
    await wait(500);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await screenshot(page, "orders-mobile");
    await account.click();
    await page.getByRole("menuitem", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in" }).waitFor();
    expect(problems).toEqual([]);
  });

  test("a user changes their password from the account menu, and signs in again with it", async () => {
    const who = { name: "Rae", email: "rae@pw.example", organization: "Rae Labs", password: "amber quarry signal 41" };
    await apiSignUp(server, who);
    const { page, problems } = await openSession(browser, server);
    await signIn(page, who);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("button", { name: "Account" }).click();
    await page.getByRole("menuitem", { name: "Change password…" }).click();
    const dialog = page.getByRole("dialog", { name: "Change your password" });
    await accessible(page, "password dialog");
    const next = "copper meadow falcon 58";
    // A wrong current password, and a common new one, are named on their fields.
    await dialog.getByLabel("Current password").fill("not my password at all");
    await dialog.getByLabel("New password", { exact: true }).fill(next);
    await dialog.getByLabel("New password again").fill(next);
    await dialog.getByRole("button", { name: "Change password" }).click();
    await dialog.getByText("This is not your current password").waitFor();
    await dialog.getByLabel("Current password").fill(who.password);
    await dialog.getByLabel("New password", { exact: true }).fill("password12345");
    await dialog.getByLabel("New password again").fill("password12345");
    await dialog.getByRole("button", { name: "Change password" }).click();
    await dialog.getByText("is too common").waitFor();
    await dialog.getByLabel("New password", { exact: true }).fill(next);
    await dialog.getByLabel("New password again").fill(next);
    await dialog.getByRole("button", { name: "Change password" }).click();
    // Every session ends, this one too: the console asks to sign in again.
    await page.getByText("Password changed. Sign in with the new one.").waitFor();
    await page.getByRole("button", { name: "Sign in" }).waitFor();
    await expect(apiToken(server, who)).rejects.toThrow(/login failed: 401/);
    await signIn(page, { ...who, password: next });
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    expect(problems).toEqual([]);
  });

  test("the account menu opens the manual, served beside the console", async () => {
    const { page, problems } = await openSession(browser, server);
    await signIn(page, TENANT);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("button", { name: "Account" }).click();
    await page.getByRole("menuitem", { name: "Documentation" }).click();
    await page.waitForURL(`${server.url}/docs/`);
    await page.locator("main").getByRole("heading", { name: "Gantry", level: 1 }).waitFor();
    // Its pages link to each other inside /docs.
    await page.getByRole("link", { name: "Jobs", exact: true }).first().click();
    await page.waitForURL(`${server.url}/docs/jobs.html`);
    await page.locator("main").getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
    await screenshot(page, "manual");
    expect(problems).toEqual([]);
  });
});

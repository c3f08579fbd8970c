// Every page at 390 px, in English and in Korean, for a tenant with work
// and for the operator: nothing wider than the screen, and no serious
// accessibility violation.
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { accessible, apiCall, apiSignUp, apiToken, browserSuite, chooseLanguage, OPERATOR, screenshot, signIn, until } from "./harness";

const JUNO = { name: "Juno", email: "juno@example.com", organization: "Juliet Labs", password: "juliet labs passphrase" };
const PHONE = { width: 390, height: 844 };

const suite = browserSuite();


/** Visits each page at phone width: it fits, and passes the accessibility check. */
async function walk(page: Page, pages: [string, string][], language: string) {
  for (const [name, path] of pages) {
    await page.goto(path);
    await page.locator("main h2").first().waitFor();
    await expect.poll(() => page.locator("main .mantine-Loader-root:visible").count(), { timeout: 15_000 }).toBe(0);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    if (wide > 390) await screenshot(page, `mobile-${language}-${name}-too-wide`);
    expect(wide, `${language} ${name} fits 390 px`).toBeLessThanOrEqual(390);
    await accessible(page, `${language} ${name} at 390 px`);
  }
}

describe("at 390 px", () => {
  test("every tenant and operator page fits and passes axe, in English and in Korean", async () => {
    const { org, token } = await apiSignUp(suite.server, JUNO);
    const order = await apiCall<{ id: string }>(suite.server, token, "POST", `/orgs/${org}/orders`, { instance_type: "h100x8", ports: [8888] });
    const job = await apiCall<{ id: string }>(suite.server, token, "POST", `/orgs/${org}/orders`, {
      instance_type: "h100x1",
      job: { command: "python", args: ["train.py", "--a-very-long-argument-that-does-not-fit-on-a-phone-screen=1"], env: { LEARNING_RATE: "0.1", EPOCHS: "3" } },
    });
    await until("the instance runs", async () => (await apiCall<{ status: string }>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`)).status === "running");
    const nodes = await apiCall<{ items: { id: string }[] }>(suite.server, await apiToken(suite.server, OPERATOR), "GET", "/admin/nodes?limit=1");

    const tenantPages: [string, string][] = [
      ["overview", `/orgs/${org}`],
      ["launch", `/orgs/${org}/launch`],
      ["orders", `/orgs/${org}/orders`],
      ["order", `/orgs/${org}/orders/${order.id}`],
      ["job", `/orgs/${org}/orders/${job.id}`],
      ["reservations", `/orgs/${org}/reservations`],
      ["volumes", `/orgs/${org}/volumes`],
      ["usage", `/orgs/${org}/usage`],
      ["invoices", `/orgs/${org}/invoices`],
      ["sla", `/orgs/${org}/sla`],
      ["settings", `/orgs/${org}/settings`],
      ["ssh-keys", `/orgs/${org}/settings?tab=ssh`],
      ["catalog", "/catalog"],
    ];
    const tenant = await suite.session(PHONE);
    await signIn(tenant.page, JUNO);
    await tenant.page.getByRole("heading", { name: "Overview" }).waitFor();
    await walk(tenant.page, tenantPages, "en");
    await chooseLanguage(tenant.page, "Account", "한국어");
    await expect.poll(() => tenant.page.evaluate(() => document.documentElement.lang)).toBe("ko");
    await walk(tenant.page, tenantPages, "ko");
    await apiCall(suite.server, token, "PATCH", "/me", { locale: null });

    const operatorPages: [string, string][] = [
      ["capacity", "/admin/capacity"],
      ["calendar", "/admin/calendar"],
      ["queues", "/admin/queues"],
      ["trends", "/admin/trends"],
      ["organizations", "/admin/orgs"],
      ["organization", `/admin/orgs/${org}`],
      ["nodes", "/admin/nodes"],
      ["node", `/admin/nodes/${nodes.items[0]?.id ?? ""}`],
      ["catalog-admin", "/admin/catalog"],
      ["sla-reports", "/admin/sla"],
      ["audit", "/admin/audit"],
    ];
    const operator = await suite.session(PHONE);
    await signIn(operator.page, OPERATOR);
    await operator.page.getByRole("heading", { name: "Capacity map" }).waitFor();
    await walk(operator.page, operatorPages, "en");
    await chooseLanguage(operator.page, "Account", "한국어");
    await expect.poll(() => operator.page.evaluate(() => document.documentElement.lang)).toBe("ko");
    await walk(operator.page, operatorPages, "ko");
    await apiCall(suite.server, await apiToken(suite.server, OPERATOR), "PATCH", "/me", { locale: null });
    // Forty-eight page visits, each with an accessibility scan: more than
    // the default allows on a slow two-core machine.
  }, 240_000);
});

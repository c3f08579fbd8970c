// The console end to end: real server, real browser, the flows a tenant and
// an operator go through. Screenshots of the main pages land in
// e2e/artifacts/.
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, onTestFinished, test } from "vitest";
import {
  accessible,
  apiCall,
  apiToken,
  instanceTypeId,
  chooseLanguage,
  launchBrowser,
  OPERATOR,
  openSession,
  screenshot,
  type Server,
  type Session,
  signIn,
  signUp,
  startServer,
  until,
} from "./harness";

const ALICE = { name: "Alice", email: "alice@example.com", organization: "Alpha Lab", password: "alpha lab passphrase" };
const BOB = { name: "Bob", email: "bob@example.com", organization: "Bravo Works", password: "bravo works passphrase" };
const CAROL = { name: "Carol", email: "carol@example.com", organization: "Carol Consulting", password: "third colleague passphrase 9" };
const H100 = "H100-SXM-80GB";

let server: Server;
let browser: Browser;
const sessions: Session[] = [];
// What the first tenant's flow leaves for the isolation test.
let alphaOrg = "";
let alphaOrder = "";

async function session(): Promise<Session> {
  const opened = await openSession(browser, server);
  sessions.push(opened);
  return opened;
}

/** Texts matching `selector` that are cut off ("RUNNI…"): wider than their box. */
async function truncated(page: Page, selector: string): Promise<string[]> {
  const [seen, cut] = await page.$$eval(selector, (elements) => [
    elements.length,
    elements.filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent ?? ""),
  ] as const);
  expect(seen, `nothing matches ${selector}`).toBeGreaterThan(0);
  return [...cut];
}

/**
 * Visits each page: it loads without a problem, passes the accessibility
 * check, and is kept as a screenshot named after it and the language.
 */
async function tour(page: Page, pages: readonly (readonly [string, string])[], language: "en" | "ko") {
  for (const [name, path] of pages) {
    await page.goto(path);
    await page.locator("main h2").first().waitFor();
    await expect.poll(() => page.locator("main .mantine-Loader-root:visible").count(), { timeout: 15_000, message: `${name} keeps loading` }).toBe(0);
    expect(await page.evaluate(() => document.documentElement.lang)).toBe(language);
    expect(await page.getByRole("alert").filter({ hasText: /wrong|잘못|refused|거절/i }).count(), `${name} shows a problem`).toBe(0);
    await screenshot(page, `${language}-${name}`);
    await accessible(page, `${language} ${name}`);
  }
}

beforeAll(async () => {
  // Fleet history every 5 s, so the Trends page has points within a test.
  server = await startServer({
    GANTRY_HISTORY_INTERVAL_SECONDS: "5",
    // The webhook test's receiver listens on this machine.
    GANTRY_WEBHOOK_ALLOWED_NETWORKS: "127.0.0.0/8",
    GANTRY_WEBHOOK_ALLOW_HTTP: "true",
  });
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

const SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJH2WhWEoOAhfBoL8U4rbKy6NcTA9RoOQDpaTBx8feAh user@example.com";
const SSH_FINGERPRINT = "SHA256:XtWlQK7JAgtqVn4W3A0IUea3IytM8gc1Hwvs7Mr5wkY";

describe("the console", () => {
  test("a new tenant signs up, orders 1×8 H100, sees it run on its GPUs, sees usage grow, cancels", async () => {
    const { page } = await session();
    await signUp(page, ALICE);
    alphaOrg = new URL(page.url()).pathname.split("/")[2] ?? "";
    expect(alphaOrg).toMatch(/^[0-9a-f-]{36}$/);
    await screenshot(page, "overview");
    await accessible(page);

    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByRole("heading", { name: "Launch GPU capacity" }).waitFor();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x8 / }).click();
    await expect.poll(() => page.getByTestId("estimate-hourly").textContent()).toMatch(/\/ hour/);
    // Before launching: the price per GPU-hour and what is free now, per region.
    const byRegion = page.getByRole("table", { name: "Prices and room now by region" });
    await byRegion.getByRole("columnheader", { name: "Start now" }).waitFor();
    await expect.poll(() => byRegion.getByText(/^\d+ free now$/).count()).toBeGreaterThan(0);
    await screenshot(page, "launch");
    await accessible(page);
    await page.getByRole("button", { name: "Launch", exact: true }).click();

    // Named after its shape, with two words that tell it from its neighbours.
    const heading = page.getByRole("heading", { name: /^h100x8-[a-z]+-[a-z]+$/ });
    await heading.waitFor();
    const orderName = (await heading.textContent()) ?? "";
    alphaOrder = new URL(page.url()).pathname.split("/").at(-1) ?? "";
    const status = page.locator("text=running").first();
    await status.waitFor({ timeout: 30_000 });
    const placement = page.getByRole("table", { name: "Placement" });
    await expect.poll(() => placement.locator("code").first().textContent()).toBe("0,1,2,3,4,5,6,7");
    // Ordered for any region: the page says where it runs.
    await page.getByText(/^any \(runs in (us-east|eu-central)\)$/).waitFor();
    await expect.poll(() => page.getByRole("table", { name: "Access" }).locator("code").first().textContent()).toMatch(/^ssh root@/);

    const metered = async () => Number((await page.getByText(/GPU-seconds$/).textContent())?.split(" ")[0] ?? "0");
    await until("usage is metered", async () => (await metered()) > 0);
    const first = await metered();
    await until("usage grows", async () => (await metered()) > first);
    // Its cost so far, as the invoice will rate it.
    await expect.poll(() => page.getByTestId("order-cost").textContent()).toMatch(/[1-9]/);
    await screenshot(page, "order-running");
    await accessible(page);

    await page.getByRole("button", { name: "Cancel order" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Cancel order" }).click();
    await page.locator("text=cancelled").first().waitFor({ timeout: 30_000 });
    // The page keeps refreshing until the order's end is in.
    await page.getByTestId("timeline-ended").waitFor({ timeout: 30_000 });
    await page.getByText("Its GPUs were released when it ended.").waitFor();

    await page.getByRole("link", { name: "Orders", exact: true }).click();
    await page.getByRole("table", { name: "Orders" }).waitFor();
    await expect.poll(() => page.getByRole("table", { name: "Orders" }).locator("tbody tr").count()).toBe(1);
    await page.getByRole("table", { name: "Orders" }).getByRole("link", { name: orderName }).waitFor();
    await screenshot(page, "orders");
    expect(await truncated(page, "table[aria-label='Orders'] .mantine-Badge-label")).toEqual([]);

    await page.getByRole("link", { name: "Usage", exact: true }).click();
    await page.getByTestId("usage-total").waitFor();
    // The period's cost beside its GPU-hours.
    await expect.poll(() => page.getByTestId("usage-total").textContent()).toMatch(/GPU-hours billable.*, costing \$\d/);
    await screenshot(page, "usage");
    await accessible(page);

    // The month's spend is what was metered, rated: not zero.
    await page.getByRole("link", { name: "Overview", exact: true }).click();
    await expect.poll(() => page.getByTestId("spend-month").textContent(), { timeout: 15_000 }).toMatch(/[1-9]/);

    await page.getByRole("link", { name: "Members & API keys" }).click();
    await page.getByRole("tab", { name: "API keys" }).click();
    await page.getByLabel("New key name").fill("ci");
    await page.getByRole("button", { name: "Create key" }).click();
    await expect.poll(() => page.getByTestId("api-key-secret").textContent()).toMatch(/^gk_/);
    await screenshot(page, "api-key-created");
    await page.getByRole("button", { name: "Done" }).click();
    await page.getByRole("table", { name: "API keys" }).getByText("ci", { exact: true }).waitFor();

    await page.getByRole("tab", { name: "SSH keys" }).click();
    await page.getByRole("textbox", { name: "Key name" }).fill("laptop");
    await page.getByRole("textbox", { name: "Public key" }).fill(SSH_KEY);
    await page.getByRole("button", { name: "Add key" }).click();
    await page.getByRole("table", { name: "SSH keys" }).getByText(SSH_FINGERPRINT).waitFor();
    await screenshot(page, "ssh-keys");
    await accessible(page);
  });

  test("a tenant submits a job array from the launch form and follows its jobs", async () => {
    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByText("Job (runs a command to completion)").click();
    await page.getByRole("textbox", { name: "Command" }).fill("python sweep.py");
    await page.getByRole("textbox", { name: "Arguments" }).fill("--lr\n0.1");
    await page.getByRole("textbox", { name: "Environment" }).fill("EPOCHS=3");
    // A token goes in as a secret variable, typed once and never shown.
    await page.getByRole("button", { name: "Add a secret variable" }).click();
    await page.getByRole("textbox", { name: "Name of secret 1" }).fill("EPOCHS");
    await page.getByLabel("Value of EPOCHS").fill("hf_console_s3cret");
    expect(await page.getByLabel("Value of EPOCHS").getAttribute("type")).toBe("password");
    await page.getByRole("textbox", { name: "Array size" }).fill("3");
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    // Picking the chosen type again keeps it.
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    expect(await page.getByRole("combobox", { name: "Instance type" }).inputValue()).toMatch(/^h100x1 /);
    // The estimate is the whole array's: three jobs at h100x1's hour.
    const one = await page.evaluate(async () => {
      const token = (JSON.parse(localStorage.getItem("gantry.session") ?? "{}") as { token?: string }).token;
      const types = (await (await fetch("/api/v1/catalog/instance-types?limit=200", { headers: { authorization: `Bearer ${token}` } })).json()) as {
        items: { name: string; prices: { pricing_class: string; region: string | null; hourly_micros: number }[] }[];
      };
      const h100x1 = types.items.find((t) => t.name === "h100x1");
      return h100x1?.prices.find((p) => p.pricing_class === "on_demand" && !p.region)?.hourly_micros ?? 0;
    });
    expect(one).toBeGreaterThan(0);
    const hourly = async () => Number((await page.getByTestId("estimate-hourly").textContent())?.replace(/[^0-9.]/g, ""));
    await expect.poll(hourly).toBeCloseTo((3 * one) / 1e6, 2);
    await page.getByText("3 jobs × 1 × h100x1").waitFor();
    await page.getByRole("textbox", { name: "Duration (hours)" }).fill("0.0005");
    await screenshot(page, "launch-job");
    await page.getByRole("button", { name: "Submit job" }).click();
    // A name given twice is caught before the order is sent.
    await page.getByText("EPOCHS is given twice").waitFor();
    await page.getByRole("textbox", { name: "Name of secret 1" }).fill("HF_TOKEN");
    await page.getByRole("button", { name: "Submit job" }).click();

    // Members carry the array's name and their index.
    await page.getByRole("heading", { name: /^h100x1-[a-z]+-[a-z]+-0$/ }).waitFor();
    expect(await page.getByTestId("job-command").textContent()).toBe('python sweep.py "--lr" "0.1"');
    expect(await page.getByTestId("job-env").textContent()).toBe("EPOCHS=3\nHF_TOKEN=(secret, not shown)");
    expect(await page.content()).not.toContain("hf_console_s3cret");
    const jobId = new URL(page.url()).pathname.split("/").at(-1) ?? "";
    const submitted = await apiCall<{ job: { secret_env: string[] } }>(server, await apiToken(server, ALICE), "GET", `/orgs/${alphaOrg}/orders/${jobId}`);
    expect(submitted.job.secret_env).toEqual(["HF_TOKEN"]);
    expect(JSON.stringify(submitted)).not.toContain("hf_console_s3cret");
    // The simulated node runs it for its two seconds, then it completes;
    // the page follows it to the end without a reload.
    await page.getByRole("heading", { name: "Status" }).locator("..").getByText("completed").waitFor({ timeout: 30_000 });
    const attempt = page.getByRole("table", { name: "Attempts" }).locator("tbody tr").first();
    await expect.poll(() => attempt.locator("td").nth(4).textContent(), { timeout: 15_000 }).toBe("completed");
    expect(await attempt.locator("td").nth(5).textContent()).toBe("0");
    await expect.poll(() => page.getByTestId("job-output").textContent()).toContain("[gantry] simulated node");
    await page.getByText(/^Its GPUs were released when it ended; the attempts show where it ran\.$/).waitFor();
    await page.getByTestId("timeline-ended").waitFor();
    await screenshot(page, "job");
    await accessible(page);

    // The card says how the whole array stands, counted by the server.
    await expect.poll(() => page.getByTestId("array-standing").textContent(), { timeout: 30_000 }).toBe(": 3 members, 3 completed");
    // The array's three members, listed together.
    await page.getByText(/^Member 0 of array/).getByRole("link").click();
    await expect.poll(() => page.getByRole("table", { name: "Orders" }).locator("tbody tr").count()).toBe(3);
  });

  test("a second tenant cannot see the first tenant's orders", async () => {
    expect(alphaOrder).not.toBe("");
    const { page } = await session();
    await signUp(page, BOB);
    const bravoOrg = new URL(page.url()).pathname.split("/")[2];

    await page.goto(`/orgs/${bravoOrg}/orders`);
    await page.getByText("No orders here").waitFor();

    // Another tenant's order through this tenant's own organization: unknown.
    await page.goto(`/orgs/${bravoOrg}/orders/${alphaOrder}`);
    await page.getByRole("alert").waitFor();
    expect(await page.getByRole("alert").textContent()).toMatch(/no order|not found/i);
    expect(await page.getByRole("table", { name: "Placement" }).count()).toBe(0);

    // The other organization itself: refused, and nothing of it shown.
    await page.goto(`/orgs/${alphaOrg}/orders`);
    await page.getByRole("alert").waitFor();
    expect(await page.getByRole("alert").textContent()).toMatch(/not a member|no organization|not found|forbidden/i);
    expect(await page.getByRole("table", { name: "Orders" }).count()).toBe(0);
    expect(await page.content()).not.toContain(alphaOrder);
  });

  test("an operator raises a tenant's quota and the waiting order starts", async () => {
    const operatorToken = await apiToken(server, OPERATOR);
    const bobToken = await apiToken(server, BOB);
    const me = await apiCall<{ memberships: { organization: { id: string } }[] }>(server, bobToken, "GET", "/me");
    const bravoOrg = me.memberships[0]?.organization.id ?? "";
    await apiCall(server, operatorToken, "PUT", `/admin/orgs/${bravoOrg}/quotas`, {
      quotas: [{ gpu_model: H100, guaranteed_gpus: 0, max_gpus: 8 }],
    });
    const order = { instance_type: "h100x8", region: "us-east" };
    await apiCall(server, bobToken, "POST", `/orgs/${bravoOrg}/orders`, order);
    const waiting = await apiCall<{ id: string }>(server, bobToken, "POST", `/orgs/${bravoOrg}/orders`, order);

    const tenant = await session();
    await signIn(tenant.page, BOB);
    await tenant.page.getByRole("heading", { name: "Overview" }).waitFor();
    await tenant.page.goto(`/orgs/${bravoOrg}/orders/${waiting.id}`);
    await tenant.page.getByText("Why it waits").waitFor({ timeout: 30_000 });
    expect(await tenant.page.getByRole("alert").filter({ hasText: "Why it waits" }).textContent()).toMatch(/quota/i);
    await screenshot(tenant.page, "order-waiting");

    const operator = await session();
    await signIn(operator.page, OPERATOR);
    await operator.page.getByRole("link", { name: "Organizations & quotas" }).click();
    await operator.page.getByRole("link", { name: BOB.organization }).click();
    // GPU model names are shown whole in their selects.
    await operator.page.getByLabel("GPU model of quota 1").first().waitFor();
    expect(await truncated(operator.page, "input[aria-label^='GPU model of quota']")).toEqual([]);
    const maximum = operator.page.getByLabel(`Maximum GPUs of ${H100}`);
    await maximum.fill("16");
    await screenshot(operator.page, "quotas");
    await accessible(operator.page);
    await operator.page.getByRole("button", { name: "Save quotas" }).click();
    await operator.page.getByText("Quotas saved").waitFor();

    // The operator lets the tenant queue nothing more, then gives it the
    // installation's default back.
    const limit = operator.page.getByLabel("Limit of its own");
    await limit.fill("0");
    await operator.page.getByRole("button", { name: "Save limit" }).click();
    await operator.page.getByText("Waiting-order limit saved").waitFor();
    await expect(apiCall(server, bobToken, "POST", `/orgs/${bravoOrg}/orders`, order)).rejects.toThrow(
      /429.*too_many_waiting_orders/,
    );
    await limit.fill("");
    await operator.page.getByRole("button", { name: "Save limit" }).click();
    await operator.page.getByText("(the installation's default)").waitFor();

    // The tenant's page refreshes on its own.
    await tenant.page.locator("text=running").first().waitFor({ timeout: 30_000 });
    await tenant.page.getByRole("table", { name: "Placement" }).waitFor();

    await operator.page.getByRole("link", { name: "Queues" }).click();
    await operator.page.getByRole("heading", { name: "Queues" }).waitFor();
    await screenshot(operator.page, "queues");

    // A defragmentation plan is only a question: it answers with what it
    // would start, or why there is nothing to move.
    const defrag = operator.page.getByLabel("Defragmentation", { exact: true });
    await defrag.getByRole("button", { name: "Plan" }).click();
    await defrag.getByTestId("defrag-effect").waitFor();
    expect(await defrag.getByTestId("defrag-effect").textContent()).toMatch(/^Starts now: \d+ as things are, \d+ after the moves, losing /);
  });

  test("an operator sees the fragmentation map", async () => {
    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("link", { name: "Capacity map" }).click();
    await page.getByRole("heading", { name: "Capacity map" }).waitFor();
    // Bravo's two instances hold 16 H100s; each GPU says who holds it.
    await expect.poll(() => page.getByRole("listitem", { name: new RegExp(`: ${BOB.organization} \\(order`) }).count()).toBe(16);
    await page.getByRole("table", { name: `Placeable shapes of ${H100}` }).waitFor();
    expect(await truncated(page, "a[href^='/admin/nodes/']")).toEqual([]);
    expect(await page.getByText(/idle h100x8/).count()).toBeGreaterThan(0);
    await screenshot(page, "capacity-map");
    await accessible(page);

    await page.getByRole("link", { name: "Nodes", exact: true }).click();
    await page.getByRole("table", { name: "Nodes" }).waitFor();
    await screenshot(page, "nodes");
    await page.getByRole("link", { name: "Audit log" }).click();
    await page.getByRole("table", { name: "Audit log" }).waitFor();
    await screenshot(page, "audit-log");
  });

  test("an operator follows the fleet over time, with the API's figures", async () => {
    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("link", { name: "Trends" }).click();
    await page.getByRole("heading", { name: "Trends" }).waitFor();
    const token = await apiToken(server, OPERATOR);
    type History = { series: { metric: string; gpu_model?: string | null; points: { value: number }[] }[] };
    const latest = (h: History, metric: string) =>
      h.series.find((s) => s.metric === metric && (s.gpu_model ?? H100) === H100)?.points.at(-1)?.value;
    // The newest step moves while the scheduler writes into it: the page,
    // reloaded, shows the figures the API gave just before.
    await expect
      .poll(
        async () => {
          const h = await apiCall<History>(server, token, "GET", "/admin/history?range=hour");
          const expected = `Latest: ${latest(h, "gpus_allocated")} allocated · ${latest(h, "gpus_free")} free · ${latest(h, "gpus_schedulable")} schedulable as whole nodes`;
          await page.reload();
          const shown = await page.getByTestId(`trend-gpus-${H100}`).textContent({ timeout: 10_000 });
          return shown === expected && latest(h, "gpus_allocated") !== undefined;
        },
        { timeout: 60_000, interval: 1_000 },
      )
      .toBe(true);
    await page.getByRole("img", { name: `${H100} GPUs` }).locator("canvas").waitFor();
    await page.getByRole("img", { name: "Queue" }).locator("canvas").waitFor();
    await page.getByRole("img", { name: "GPU-hours by organization" }).locator("canvas").waitFor();
    await page.getByText(/GPU-hours in the range/).waitFor();
    await page.getByText("No node reported GPU telemetry in this range (simulated nodes report none).").waitFor();
    await screenshot(page, "trends");
    await accessible(page);

    await page.getByText("Last week", { exact: true }).click();
    await page.getByText(/^One point per 1 h:/).waitFor();
  });

  test("a tenant orders a quarter GPU and a MIG slice, and the operator sees the GPUs they share", async () => {
    const tenant = await session();
    await signIn(tenant.page, ALICE);
    const launched: string[] = [];
    for (const [type, shape] of [
      ["h100-quarter", `¼ of one ${H100}`],
      ["h100-mig-1g10gb", `MIG 1g.10gb of one ${H100}`],
    ] as const) {
      const { page } = tenant;
      await page.getByRole("link", { name: "Launch", exact: true }).first().click();
      await page.getByRole("heading", { name: "Launch GPU capacity" }).waitFor();
      await page.getByRole("combobox", { name: "Instance type" }).click();
      await page.getByRole("option", { name: new RegExp(`^${type} — ${shape}`) }).click();
      await expect.poll(() => page.getByTestId("estimate-hourly").textContent()).toMatch(/\/ hour/);
      // Priced per instance and counted per slice, as the API counts them.
      const room = page.getByRole("table", { name: "Prices and room now by region" });
      await room.getByRole("columnheader", { name: "Per instance-hour" }).waitFor();
      const token = await apiToken(server, ALICE);
      const typeId = await instanceTypeId(server, token, type);
      const counted = async () => {
        const now = await apiCall<{ regions: { instances_now: number | null }[] }>(server, token, "GET", `/catalog/instance-types/${typeId}/availability`);
        const shown = await room.getByText(/ free now$/).allTextContents();
        const free = now.regions.map((r) => r.instances_now ?? 0).filter((n) => n > 0);
        return free.length > 0 && free.every((n) => shown.includes(`${n} free now`));
      };
      await expect.poll(counted, { message: `${type}: the free count of each region with room` }).toBe(true);
      await page.getByRole("button", { name: "Launch", exact: true }).click();
      await page.getByRole("heading", { name: new RegExp(`^${type}-`) }).waitFor();
      launched.push(new URL(page.url()).pathname.split("/").at(-1) ?? "");
      await page.locator("text=running").first().waitFor({ timeout: 30_000 });
      await page.getByText(shape).first().waitFor();
      const visible = page.getByRole("table", { name: "Placement" }).locator("code").first();
      await expect.poll(() => visible.textContent()).toMatch(type.includes("mig") ? /^MIG-/ : /^\d$/);
    }
    await screenshot(tenant.page, "order-mig-slice");

    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("link", { name: "Capacity map" }).click();
    await page.getByRole("heading", { name: "Capacity map" }).waitFor();
    await page.getByRole("listitem", { name: new RegExp(`: shared: ${ALICE.organization} ¼ \\(order`) }).first().waitFor();
    await page.getByRole("listitem", { name: new RegExp(`: shared \\(MIG\\): ${ALICE.organization} MIG 1g\\.10gb`) }).first().waitFor();
    await screenshot(page, "capacity-map-shared");
    await accessible(page);
    // The nodes list counts shared and MIG work as work, and marks MIG nodes.
    await page.getByRole("link", { name: "Nodes", exact: true }).click();
    const use = page.getByTestId("node-gpus");
    await expect.poll(async () => (await use.allTextContents()).some((text) => /^\d+ \/ [1-9]\d* \/ \d+ \/ \d+/.test(text))).toBe(true);
    await expect
      .poll(async () =>
        (await use.allTextContents()).some((text) => {
          const mig = /MIG\s*(\d+) of (\d+) instances free/.exec(text);
          return mig !== null && Number(mig[1]) < Number(mig[2]);
        }),
      )
      .toBe(true);

    for (const order of launched) {
      await apiCall(server, await apiToken(server, ALICE), "POST", `/orgs/${alphaOrg}/orders/${order}/cancel`, {});
    }
  });

  test("a tenant reserves capacity from the availability calendar, runs an order in it and cancels it", async () => {
    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("link", { name: "Reservations", exact: true }).click();
    await page.getByRole("heading", { name: "Reservations", exact: true }).waitFor();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x8 / }).click();
    await page.getByRole("combobox", { name: "Region" }).click();
    await page.getByRole("option", { name: /\(us-east\)$/ }).click();
    await page.getByRole("textbox", { name: "Hours" }).fill("3");
    await page.getByRole("textbox", { name: "Name" }).fill("launch week");
    // The calendar offers the next week hour by hour; pick the third hour.
    const calendar = page.getByRole("table", { name: "Instances free to reserve, by hour (UTC)" });
    const hours = calendar.getByRole("button", { name: / UTC: [1-9]\d* free$/ });
    await expect.poll(() => hours.count()).toBeGreaterThan(24);
    const picked = hours.nth(2);
    const pickedLabel = (await picked.getAttribute("aria-label")) ?? "";
    await picked.click();
    const hour = pickedLabel.split(" ")[1] ?? "";
    expect(await page.getByRole("combobox", { name: "Start hour (UTC)" }).inputValue()).toBe(hour);
    await page.getByTestId("reservation-available").waitFor();
    // Three hours of one h100x8 at the reserved price.
    await expect.poll(() => page.getByTestId("reservation-total").textContent()).toMatch(/^\$\d/);
    await screenshot(page, "reservation-form");
    await accessible(page);
    await page.getByRole("button", { name: "Reserve", exact: true }).click();
    await page.getByText("Reservation launch week confirmed").waitFor();
    const list = page.getByRole("table", { name: "Reservations" });
    await list.getByText("launch week").waitFor();
    await list.getByText("upcoming").waitFor();
    await screenshot(page, "reservations");

    // An order in the reservation waits for its window.
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByRole("heading", { name: "Launch GPU capacity" }).waitFor();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    await page.getByText("reserved", { exact: true }).click();
    await page.getByRole("combobox", { name: "Reservation" }).click();
    await page.getByRole("option", { name: /^launch week / }).click();
    // The reservation paid for its GPUs and holds them: no hourly price, no queue in sight.
    await expect.poll(() => page.getByTestId("estimate-reserved").textContent()).toMatch(/^Paid by reservation launch week: its 1 × h100x8 are held for you until /);
    expect(await page.getByTestId("estimate-hourly").count()).toBe(0);
    expect(await page.getByText(/GPUs queued|None free now/).count()).toBe(0);
    await page.getByRole("textbox", { name: "Name" }).fill("launch-week-run");
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByRole("heading", { name: "launch-week-run" }).waitFor();
    await page.getByText("Why it waits").waitFor({ timeout: 30_000 });
    // Its estimated start is the window's, and says how firm it is.
    const confidence = page.getByTestId("estimate-confidence");
    await confidence.waitFor({ timeout: 30_000 });
    expect(await confidence.textContent()).toMatch(/^(Reserved: GPUs are held|Planned behind other waiting work)/);

    // It grows by an hour on the same GPUs; cancelling it stops the order in it.
    await page.getByRole("link", { name: "Reservations", exact: true }).click();
    await page.getByRole("textbox", { name: "Hours to add to launch week" }).fill("1");
    await list.getByRole("button", { name: "Extend", exact: true }).click();
    // The charge is stated before it is made.
    const extension = page.getByRole("dialog", { name: "Extend launch week by 1 hour?" });
    expect(await extension.textContent()).toMatch(/charged at its reserved rate of \$[\d.,]+ per instance-hour: \$[\d.,]+ more/);
    await extension.getByRole("button", { name: "Extend and pay" }).click();
    await page.getByText(/^Reservation launch week now ends /).waitFor();
    await list.getByRole("button", { name: "Cancel", exact: true }).click();
    // What cancelling costs is stated, and that its orders go with it.
    const cancelling = page.getByRole("dialog", { name: "Cancel reservation launch week?" });
    await expect.poll(() => cancelling.textContent()).toMatch(/orders waiting for it are cancelled\. Cancelling now costs (nothing|\$[\d.,]+ in all)/);
    await cancelling.getByRole("button", { name: "Cancel reservation" }).click();
    await list.getByText("cancelled").waitFor({ timeout: 30_000 });
    await page.getByRole("link", { name: "Orders", exact: true }).click();
    await page.getByRole("table", { name: "Orders" }).getByText("cancelled").first().waitFor({ timeout: 30_000 });
  });

  test("an operator sees reservations on the calendar", async () => {
    const alice = await apiToken(server, ALICE);
    const start = new Date(Math.floor(Date.now() / 3_600_000) * 3_600_000 + 5 * 3_600_000);
    const end = new Date(start.getTime() + 4 * 3_600_000);
    const iso = (d: Date) => d.toISOString().replace(".000Z", "Z");
    await apiCall(server, alice, "POST", `/orgs/${alphaOrg}/reservations`, {
      name: "eval sweep",
      instance_type: "h100x8",
      count: 2,
      region: "us-east",
      starts_at: iso(start),
      ends_at: iso(end),
    });
    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("link", { name: "Reservation calendar" }).click();
    await page.getByRole("heading", { name: "Reservation calendar" }).waitFor();
    await page.getByRole("combobox", { name: "GPU model" }).click();
    await page.getByRole("option", { name: H100 }).click();
    expect(await truncated(page, "input[aria-label='GPU model'], .mantine-Select-input")).toEqual([]);
    const table = page.getByRole("table", { name: "Reservations in the calendar" });
    const row = table.getByRole("row").filter({ hasText: "eval sweep" });
    await row.getByText(ALICE.organization).waitFor();
    const reservedNode = ((await row.getByRole("cell").nth(4).textContent()) ?? "").split(", ")[0] ?? "";
    expect(reservedNode).toMatch(/^us-east-h100-/);
    const hour = `${iso(start).slice(0, 10)} ${iso(start).slice(11, 16)} UTC: 16 reserved`;
    await page.getByLabel(new RegExp(`^${hour}`)).waitFor();
    await screenshot(page, "reservation-calendar");
    await accessible(page);
    // A node is taken out for maintenance from the same page, then returned.
    await page.getByRole("combobox", { name: "Node" }).click();
    await page.getByRole("option", { name: /l40s/ }).first().click();
    await page.getByRole("textbox", { name: "Reason" }).fill("swap a power supply");
    await page.getByRole("button", { name: "Schedule", exact: true }).click();
    await page.getByText(/^Maintenance of .+ scheduled$/).waitFor();
    const windows = page.getByRole("table", { name: "Maintenance windows" });
    await windows.getByText("swap a power supply").waitFor();
    await screenshot(page, "maintenance");
    await accessible(page);
    await windows.getByRole("button", { name: "Cancel", exact: true }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Cancel maintenance" }).click();
    await page.getByText("No maintenance scheduled.").waitFor();
    // The capacity map marks the reserved GPUs.
    await page.getByRole("link", { name: "Capacity map" }).click();
    await expect.poll(() => page.getByRole("listitem", { name: /reserved for Alpha Lab \(eval sweep\)/ }).count()).toBe(16);
    // The node lists it, and cordoning it says which reservation breaks.
    await page.getByRole("link", { name: reservedNode, exact: true }).click();
    await page.getByRole("table", { name: "Reservations on this node" }).getByText("eval sweep").waitFor();
    await page.getByRole("button", { name: "Cordon", exact: true }).click();
    expect(await page.getByRole("dialog").textContent()).toContain("reservations eval sweep");
    // Why it is cordoned goes with it, for the next operator to read.
    await page.getByRole("dialog").getByRole("textbox", { name: "Reason (optional)" }).fill("NVLink errors on GPU 3");
    await accessible(page, "cordon dialog");
    await page.getByRole("dialog").getByRole("button", { name: "Cordon", exact: true }).click();
    await page.getByText(`${reservedNode} is cordoned.`).waitFor();
    await page.getByText("Because: NVLink errors on GPU 3").waitFor();
    await page.getByRole("link", { name: "Nodes", exact: true }).click();
    const nodeRow = page.getByRole("row").filter({ has: page.getByRole("link", { name: reservedNode, exact: true }) });
    expect(await nodeRow.getByTestId("node-reason").textContent()).toBe("NVLink errors on GPU 3");
    await nodeRow.getByRole("link", { name: reservedNode, exact: true }).click();
    await page.getByRole("button", { name: "Return to service" }).click();
    await page.getByText(`${reservedNode} is ready.`).waitFor();
    await expect.poll(() => page.getByText("Because: NVLink errors on GPU 3").count()).toBe(0);
  });

  test("an operator views a tenant's organization read-only and follows links to its orders", async () => {
    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("link", { name: "Organizations & quotas" }).click();
    await page.getByRole("link", { name: ALICE.organization }).click();
    await page.getByRole("link", { name: "View as the tenant (read-only)" }).click();
    await page.getByTestId("operator-view").waitFor();
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    // Read-only: nothing to launch or cancel, and every page loads.
    expect(await page.getByRole("link", { name: "Launch", exact: true }).count()).toBe(0);
    await page.getByRole("link", { name: "Orders", exact: true }).click();
    const orders = page.getByRole("table", { name: "Orders" });
    await orders.waitFor();
    await orders.locator("tbody tr").first().waitFor();
    await screenshot(page, "operator-tenant-orders");
    await accessible(page);
    await page.goto(`/orgs/${alphaOrg}/orders/${alphaOrder}`);
    await page.getByRole("heading", { name: /^h100x8-/ }).waitFor();
    expect(await page.getByRole("button", { name: "Cancel order" }).count()).toBe(0);
    for (const link of ["Usage", "Invoices"]) {
      await page.getByRole("link", { name: link, exact: true }).click();
      await page.getByRole("heading", { name: new RegExp(`^${link}`) }).waitFor();
      expect(await page.getByRole("alert").filter({ hasText: /no organization|forbidden/i }).count()).toBe(0);
    }

    // From the node a tenant's GPUs are on, to that tenant's order.
    const operatorToken = await apiToken(server, OPERATOR);
    const running = await apiCall<{ items: { id: string; name: string; placement: { node_id: string }[] }[] }>(
      server,
      operatorToken,
      "GET",
      "/admin/orders?status=running",
    );
    const held = running.items.find((o) => o.placement.length > 0);
    expect(held).toBeDefined();
    await page.goto(`/admin/nodes/${held?.placement[0]?.node_id ?? ""}`);
    await page.getByRole("link", { name: `order ${held?.id.slice(-8) ?? ""}` }).first().click();
    await page.getByRole("heading", { name: held?.name ?? "" }).waitFor();
    await page.getByTestId("operator-view").waitFor();
  });

  test("a tenant invites a colleague by email, who joins on signing up", async () => {
    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.goto(`/orgs/${alphaOrg}/settings`);
    await page.getByRole("textbox", { name: "Add or invite a member by email" }).fill(CAROL.email);
    await page.getByRole("button", { name: "Add", exact: true }).click();
    await page.getByText(`${CAROL.email} is invited as member and joins on signing up.`).waitFor();
    await page.getByRole("table", { name: "Pending invitations" }).getByText(CAROL.email).waitFor();
    await accessible(page);

    const carol = await session();
    await signUp(carol.page, CAROL);
    await carol.page.getByRole("combobox", { name: "Organization" }).click();
    await carol.page.getByRole("option", { name: ALICE.organization }).click();
    await carol.page.getByRole("heading", { name: "Overview" }).waitFor();
    expect(new URL(carol.page.url()).pathname).toBe(`/orgs/${alphaOrg}`);
  });

  test("a tenant registers a webhook endpoint, sends a test event and reads the delivery log", async () => {
    // A receiver that checks the signature with its own HMAC, as the
    // Standard Webhooks specification defines it.
    const received: { id: string; type: string; verified: boolean }[] = [];
    let secret = "";
    const receiver = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk: Buffer) => (body += chunk.toString()));
      request.on("end", () => {
        const id = String(request.headers["webhook-id"]);
        const signed = `${id}.${String(request.headers["webhook-timestamp"])}.${body}`;
        const expected = createHmac("sha256", Buffer.from(secret.replace(/^whsec_/, ""), "base64")).update(signed).digest("base64");
        const signatures = String(request.headers["webhook-signature"]).split(" ");
        received.push({ id, type: (JSON.parse(body) as { type: string }).type, verified: signatures.includes(`v1,${expected}`) });
        response.writeHead(200).end("thanks");
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => void receiver.close());
    const port = (receiver.address() as AddressInfo).port;

    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("link", { name: "Members & API keys" }).click();
    await page.getByRole("tab", { name: "Webhooks" }).click();
    await page.getByRole("textbox", { name: "Endpoint URL" }).fill(`http://127.0.0.1:${port}/hooks`);
    await page.getByRole("textbox", { name: "Description" }).fill("CI notifications");
    await page.getByRole("button", { name: "Add endpoint" }).click();
    await expect.poll(() => page.getByTestId("webhook-secret").textContent()).toMatch(/^whsec_/);
    secret = (await page.getByTestId("webhook-secret").textContent()) ?? "";
    await page.getByRole("button", { name: "Done" }).click();
    const endpoint = page.getByTestId("webhook-endpoint");
    await endpoint.getByText("CI notifications · every event").waitFor();

    await endpoint.getByRole("button", { name: "Send test event" }).click();
    await expect.poll(() => received.length, { timeout: 15_000 }).toBe(1);
    expect(received[0]).toMatchObject({ type: "webhook.test", verified: true });
    const log = page.getByRole("table", { name: "Deliveries" });
    await expect.poll(() => log.getByTestId("webhook-last-answer").first().textContent(), { timeout: 15_000 }).toMatch(/^HTTP 200 in \d+ ms/);
    await log.getByText("delivered").waitFor();
    await log.getByText(received[0]?.id ?? "").waitFor();

    // Sent again: the same webhook-id.
    await log.getByRole("button", { name: "Send again" }).click();
    await expect.poll(() => received.length, { timeout: 15_000 }).toBe(2);
    expect(received[1]?.id).toBe(received[0]?.id);
    await screenshot(page, "webhooks");
    await accessible(page);
  });

  test("an operator allows a registry, a tenant stores its login there and launches an image from it", async () => {
    const operator = (await session()).page;
    await signIn(operator, OPERATOR);
    await operator.getByRole("heading", { name: "Capacity map" }).waitFor();
    await operator.goto("/admin/catalog");
    const prefixes = operator.getByRole("textbox", { name: "Registries and repositories" });
    await prefixes.fill("bad host/x");
    await operator.getByRole("button", { name: "Save" }).click();
    await operator.getByText(/is not a registry host/).waitFor();
    await prefixes.fill("registry.example/team\nnvcr.io/nvidia/");
    await operator.getByRole("button", { name: "Save" }).click();
    await operator.getByText("Orders may name images from 2 registries or repositories.").waitFor();
    await accessible(operator);

    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("link", { name: "Members & API keys" }).click();
    await page.getByRole("tab", { name: "Registries" }).click();
    await page.getByText("This installation allows images from nvcr.io/nvidia/, registry.example/team.").waitFor();
    await page.getByRole("textbox", { name: "Registry" }).fill("registry.example");
    await page.getByRole("textbox", { name: "User name" }).fill("ci-bot");
    await page.getByLabel("Password or token").fill("a-token-never-shown-again");
    await page.getByRole("button", { name: "Add login" }).click();
    const logins = page.getByRole("table", { name: "Registry logins" });
    await logins.getByText("ci-bot").waitFor();
    expect(await page.content()).not.toContain("a-token-never-shown-again");
    await screenshot(page, "registries");
    await accessible(page);

    // A repository outside the policy is refused on the field; one inside runs.
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    const image = page.getByRole("combobox", { name: "Image" });
    await image.fill("registry.example/teamx/train:v3");
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByText(/^registry\.example\/teamx\/train:v3 is not allowed/).waitFor();
    await image.fill("registry.example/team/train:v3");
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByRole("heading", { name: /^h100x1-[a-z]+-[a-z]+$/ }).waitFor();
    await page.getByText("registry.example/team/train:v3").first().waitFor();
    await page.locator("text=running").first().waitFor({ timeout: 30_000 });
  });

  test("an operator issues, finalizes and marks paid a tenant's invoice from the console", async () => {
    const { page } = await session();
    await signIn(page, OPERATOR);
    await page.getByRole("heading", { name: "Capacity map" }).waitFor();
    await page.goto(`/admin/orgs/${alphaOrg}`);
    // The demo cluster's simulated nodes carry no fabric, so no network yet.
    await page.getByRole("heading", { name: "Private networks" }).waitFor();
    await page.getByText(/^No private network yet/).waitFor();
    const invoices = page.getByRole("table", { name: "Invoices" });
    await page.getByRole("button", { name: "Issue last month's draft" }).click();
    await page.getByText(/^Draft for .* issued\.$/).waitFor();
    const draft = invoices.locator("tr").filter({ hasText: "draft" }).first();
    await draft.getByRole("button", { name: "Finalize" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Finalize" }).click();
    const finalized = invoices.locator("tr").filter({ hasText: "finalized" }).first();
    await finalized.getByRole("button", { name: "Mark paid" }).click();
    await invoices.locator("tr").filter({ hasText: "paid" }).first().waitFor();
    await screenshot(page, "operator-invoices");
    await accessible(page);
  });

  // Forty-four pages, each with an accessibility check: more than one
  // test's usual budget on two shared cores.
  test("every page reads in English and in Korean, kept on each account, with times in the chosen zone", async () => {
    // Whatever happens here, the accounts speak English to the tests after it.
    onTestFinished(async () => {
      for (const who of [ALICE, OPERATOR]) {
        await apiCall(server, await apiToken(server, who), "PATCH", "/me", { locale: null, time_zone: null });
      }
    });
    const tenant = await session();
    await signIn(tenant.page, ALICE);
    await tenant.page.getByRole("heading", { name: "Overview" }).waitFor();
    const tenantPages = [
      ["overview", `/orgs/${alphaOrg}`],
      ["orders", `/orgs/${alphaOrg}/orders`],
      ["order", `/orgs/${alphaOrg}/orders/${alphaOrder}`],
      ["launch", `/orgs/${alphaOrg}/launch`],
      ["reservations", `/orgs/${alphaOrg}/reservations`],
      ["volumes", `/orgs/${alphaOrg}/volumes`],
      ["usage", `/orgs/${alphaOrg}/usage`],
      ["invoices", `/orgs/${alphaOrg}/invoices`],
      ["sla", `/orgs/${alphaOrg}/sla`],
      ["settings", `/orgs/${alphaOrg}/settings`],
      ["catalog", "/catalog"],
    ] as const;
    await tour(tenant.page, tenantPages, "en");

    // The tenant picks Korean and Seoul's time in the account menu.
    await tenant.page.goto(`/orgs/${alphaOrg}`);
    await tenant.page.getByRole("heading", { name: "Overview" }).waitFor();
    await chooseLanguage(tenant.page, "Account", "한국어");
    await tenant.page.getByRole("heading", { name: "개요" }).waitFor();
    expect(await tenant.page.evaluate(() => document.documentElement.lang)).toBe("ko");
    await tenant.page.getByRole("button", { name: "계정" }).click();
    await tenant.page.getByRole("combobox", { name: "시간대" }).fill("Asia/Seoul");
    await tenant.page.getByRole("option", { name: "Asia/Seoul (UTC+9)", exact: true }).click();
    await tour(tenant.page, tenantPages, "ko");
    await tenant.page.goto(`/orgs/${alphaOrg}/orders/${alphaOrder}`);
    await expect.poll(() => tenant.page.getByTestId("timeline-ended").textContent()).toMatch(/GMT\+9|KST/);
    await tenant.page.getByText("취소됨").first().waitFor();

    // Kept on the account: a browser that never saw the choice speaks Korean after sign-in.
    const elsewhere = await session();
    await signIn(elsewhere.page, ALICE);
    await elsewhere.page.getByRole("heading", { name: "개요" }).waitFor();
    expect(await elsewhere.page.evaluate(() => document.documentElement.lang)).toBe("ko");

    // Korean at 390 px: the account menu stays on screen and the pages fit.
    const phone = await openSession(browser, server, { width: 390, height: 844 });
    sessions.push(phone);
    await signIn(phone.page, ALICE);
    await phone.page.getByRole("heading", { name: "개요" }).waitFor();
    const account = await phone.page.getByRole("button", { name: "계정" }).boundingBox();
    expect(account && account.x >= 0 && account.x + account.width <= 390).toBe(true);
    for (const [name, path] of [
      ["overview", `/orgs/${alphaOrg}`],
      ["orders", `/orgs/${alphaOrg}/orders`],
      ["order", `/orgs/${alphaOrg}/orders/${alphaOrder}`],
      ["launch", `/orgs/${alphaOrg}/launch`],
    ] as const) {
      await phone.page.goto(path);
      await phone.page.locator("main h2").first().waitFor();
      expect(await phone.page.evaluate(() => document.documentElement.scrollWidth), `${name} fits 390 px`).toBeLessThanOrEqual(390);
      await screenshot(phone.page, `ko-mobile-${name}`);
    }
    await chooseLanguage(elsewhere.page, "계정", "English");
    await elsewhere.page.getByRole("heading", { name: "Overview" }).waitFor();
    await elsewhere.page.getByRole("button", { name: "Account" }).click();
    await elsewhere.page.getByRole("combobox", { name: "Time zone" }).fill("Browser");
    await elsewhere.page.getByRole("option", { name: /^Browser's/ }).click();

    const operator = await session();
    await signIn(operator.page, OPERATOR);
    await operator.page.getByRole("heading", { name: "Capacity map" }).waitFor();
    const nodes = await apiCall<{ items: { id: string }[] }>(server, await apiToken(server, OPERATOR), "GET", "/admin/nodes?limit=1");
    const operatorPages = [
      ["capacity", "/admin/capacity"],
      ["calendar", "/admin/calendar"],
      ["queues", "/admin/queues"],
      ["trends", "/admin/trends"],
      ["organizations", "/admin/orgs"],
      ["organization", `/admin/orgs/${alphaOrg}`],
      ["nodes", "/admin/nodes"],
      ["node", `/admin/nodes/${nodes.items[0]?.id ?? ""}`],
      ["catalog-admin", "/admin/catalog"],
      ["sla-reports", "/admin/sla"],
      ["audit", "/admin/audit"],
    ] as const;
    await tour(operator.page, operatorPages, "en");
    await chooseLanguage(operator.page, "Account", "한국어");
    await tour(operator.page, operatorPages, "ko");
    await chooseLanguage(operator.page, "계정", "English");
  }, 240_000);

  test("the API reference renders from the bundled Swagger UI", async () => {
    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("link", { name: "API reference" }).click();
    // Tags open on demand.
    await page.locator("#operations-tag-orders").click({ timeout: 30_000 });
    await page.getByText("/api/v1/orgs/{org_id}/orders", { exact: true }).first().waitFor({ timeout: 30_000 });
    await screenshot(page, "api-reference");

    await page.getByRole("button", { name: "Account" }).click();
    await page.getByRole("menuitem", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    // Signed out means signed out: a console page sends back to sign-in.
    await page.goto("/catalog");
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
  });

  test("a tenant keeps a volume: made, priced, grown, attached at launch (placed on its node only), kept while attached, deleted", async () => {
    const { page } = await session();
    await signIn(page, ALICE);
    await page.getByRole("link", { name: "Volumes", exact: true }).click();
    await page.getByRole("heading", { name: "Volumes", exact: true }).waitFor();
    await page.getByRole("textbox", { name: "Name" }).fill("checkpoints");
    await page.getByRole("combobox", { name: "Region" }).click();
    await page.getByRole("option", { name: "us-east" }).click();
    await page.getByRole("textbox", { name: "Size (GiB)" }).fill("40");
    await page.getByRole("button", { name: "Create volume" }).click();
    // The demo's simulated nodes keep volumes, as an agent does, within a cycle.
    const row = page.getByRole("row", { name: /checkpoints/ });
    await row.getByText("available").waitFor({ timeout: 15_000 });
    await row.getByText("$4.00 a month").waitFor();
    const token = await apiToken(server, ALICE);
    const volumes = await apiCall<{ items: { id: string; node: string }[] }>(server, token, "GET", `/orgs/${alphaOrg}/volumes`);
    const volume = volumes.items[0];
    expect(volume?.node).toMatch(/^us-east-/);
    await row.getByText(`us-east · ${volume?.node ?? ""}`).waitFor();

    await row.getByRole("textbox", { name: "New size of checkpoints in GiB" }).fill("64");
    await row.getByRole("button", { name: "Grow" }).click();
    await row.getByText("$6.40 a month").waitFor();
    await screenshot(page, "volumes");
    await accessible(page);

    // Attached at launch: the order runs on the volume's node.
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    await page.getByRole("button", { name: "Attach a volume" }).click();
    await page.getByRole("combobox", { name: "Volume 1" }).click();
    await page.getByRole("option", { name: /^checkpoints / }).click();
    await page.getByRole("textbox", { name: "Mount path of volume 1" }).fill("/ckpt");
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.waitForURL(/\/orders\/[0-9a-f-]+$/);
    const orderId = page.url().split("/").pop() ?? "";
    type Seen = { placement: { node_name: string }[]; pending_details: unknown[]; volumes: { mount_path: string }[] };
    let seen: Seen | undefined;
    // Earlier tests may keep the volume's node busy: wherever the order is
    // placed, it is there, and until then it says why it waits.
    await until("the order is placed or says why it waits", async () => {
      seen = await apiCall<Seen>(server, token, "GET", `/orgs/${alphaOrg}/orders/${orderId}`);
      return seen.placement.length > 0 || seen.pending_details.length > 0;
    });
    expect(seen?.volumes[0]?.mount_path).toBe("/ckpt");
    for (const placed of seen?.placement ?? []) expect(placed.node_name).toBe(volume?.node);

    // Kept while attached; deleted once the order is cancelled.
    await page.getByRole("link", { name: "Volumes", exact: true }).click();
    await row.getByRole("button", { name: "Delete" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
    await page.getByText(/is attached to/).waitFor();
    await apiCall(server, token, "POST", `/orgs/${alphaOrg}/orders/${orderId}/cancel`, {});
    await until("the order ends", async () => {
      const ended = await apiCall<{ ended_at: string | null }>(server, token, "GET", `/orgs/${alphaOrg}/orders/${orderId}`);
      return ended.ended_at !== null;
    });
    await row.getByRole("button", { name: "Delete" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
    await expect.poll(() => page.getByRole("row", { name: /checkpoints/ }).count(), { timeout: 15_000 }).toBe(0);
  });

  test("nothing logged an error or reached beyond this server", () => {
    expect(sessions.flatMap((s) => s.problems)).toEqual([]);
  });
});

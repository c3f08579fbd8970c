// The browser suite's world: a real Gantry server (built binary, fresh
// SQLite file, the built console, the simulated demo cluster) and Debian's
// chromium driven by playwright-core, with every request that leaves
// localhost refused and every console error collected.
import AxeBuilder from "@axe-core/playwright";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type Browser, type BrowserContext, type BrowserContextOptions, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, expect } from "vitest";

const FRONTEND = resolve(import.meta.dirname, "..");
const REPO = resolve(FRONTEND, "..");
export const ARTIFACTS = join(FRONTEND, "e2e", "artifacts");

export const OPERATOR = { email: "ops@example.com", password: "operator passphrase 1" };

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

export type Server = { url: string; stop: () => Promise<void>; log: () => string };

/** A fresh server; `settings` add or override its environment. */
export async function startServer(settings: Record<string, string> = {}): Promise<Server> {
  const binary = process.env.GANTRY_BIN ?? join(REPO, "target", "debug", "gantry");
  const dataDir = mkdtempSync(join(tmpdir(), "gantry-e2e-"));
  const port = await freePort();
  const env = {
    ...process.env,
    GANTRY_DATA_DIR: dataDir,
    GANTRY_LISTEN: `127.0.0.1:${port}`,
    GANTRY_CONSOLE_DIR: join(FRONTEND, "dist"),
    GANTRY_DOCS_DIR: join(REPO, "docs", "book"),
    GANTRY_DEMO: "true",
    GANTRY_SCHEDULER_INTERVAL_MS: "200",
    GANTRY_SIMULATED_PROVISION_MS: "300",
    GANTRY_SIMULATED_STOP_MS: "200",
    GANTRY_METERING_INTERVAL_SECONDS: "1",
    GANTRY_AGENT_HEARTBEAT_DEADLINE_SECONDS: "1",
    GANTRY_RATE_LIMIT_PER_SECOND: "100000",
    GANTRY_RATE_LIMIT_BURST: "100000",
    GANTRY_AUTH_CACHE_SECONDS: "0",
    DATABASE_URL: "",
    ...settings,
  };
  delete (env as Record<string, string | undefined>).DATABASE_URL;
  let output = "";
  const child: ChildProcess = spawn(binary, ["serve"], { env, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout?.on("data", (chunk) => (output += chunk));
  child.stderr?.on("data", (chunk) => (output += chunk));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the server exited at start:\n${output}`);
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the server did not become ready:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  execFileSync(binary, ["admin", "create-operator", "--email", OPERATOR.email, "--password", OPERATOR.password], {
    env,
    stdio: "ignore",
  });
  return {
    url,
    log: () => output,
    stop: async () => {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export type Session = {
  context: BrowserContext;
  page: Page;
  /** Console errors, page errors and refused off-machine requests. */
  problems: string[];
};

/** Chromium with a fresh profile (playwright makes one per launch). */
export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

export async function openSession(
  browser: Browser,
  server: Server,
  viewport = { width: 1440, height: 900 },
  otherOrigins: string[] = [],
  options: BrowserContextOptions = {},
): Promise<Session> {
  const context = await browser.newContext({ ...options, baseURL: server.url, viewport });
  const problems: string[] = [];
  // The console must work on a machine with no way out: anything that is
  // not this server (or a site the test runs, such as an identity
  // provider) is refused and reported.
  await context.route(
    (url) => url.origin !== server.url && !otherOrigins.includes(url.origin),
    async (route) => {
      problems.push(`request off this server: ${route.request().url()}`);
      await route.abort();
    },
  );
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const text = message.text();
    // A refused call's own status shows up as a console error in chromium;
    // the tests that make such calls assert what the page shows instead.
    if (/Failed to load resource: the server responded with a status of 4\d\d/.test(text)) return;
    problems.push(`console: ${text}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  return { context, page, problems };
}

export async function screenshot(page: Page, name: string) {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

export async function signUp(page: Page, who: { name: string; email: string; organization: string; password: string }) {
  await page.goto("/sign-up");
  await page.getByLabel("Your name").fill(who.name);
  await page.getByRole("textbox", { name: "Email", exact: true }).fill(who.email);
  await page.getByLabel("Organization").fill(who.organization);
  await page.getByRole("textbox", { name: "Password", exact: true }).fill(who.password);
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
}

export async function signIn(page: Page, who: { email: string; password: string }) {
  await page.goto("/sign-in");
  await page.getByRole("textbox", { name: "Email", exact: true }).fill(who.email);
  await page.getByRole("textbox", { name: "Password", exact: true }).fill(who.password);
  await page.getByRole("button", { name: "Sign in" }).click();
}

/** A bearer token for setting up state through the API itself. */
export async function apiToken(server: Server, who: { email: string; password: string }): Promise<string> {
  const answer = await fetch(`${server.url}/api/v1/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: who.email, password: who.password }),
  });
  if (!answer.ok) throw new Error(`login failed: ${answer.status}`);
  return ((await answer.json()) as { access_token: string }).access_token;
}

export async function apiCall<T>(server: Server, token: string, method: string, path: string, body?: unknown): Promise<T> {
  const answer = await fetch(`${server.url}/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!answer.ok) throw new Error(`${method} ${path}: ${answer.status} ${await answer.text()}`);
  return (await answer.json()) as T;
}

/** An instance type's id, by its name. */
export async function instanceTypeId(server: Server, token: string, name: string): Promise<string | undefined> {
  const types = await apiCall<{ items: { id: string; name: string }[] }>(server, token, "GET", "/catalog/instance-types");
  return types.items.find((t) => t.name === name)?.id;
}

/** No serious accessibility violations on the page as it stands. */
export async function accessible(page: Page, where = "") {
  // A notification fading in or out is read by axe at part opacity, as a
  // contrast failure no reader would see: let finite transitions end first.
  await expect
    .poll(() => page.evaluate(() => document.getAnimations().filter((a) => a.playState === "running" && a.effect?.getTiming().iterations !== Infinity).length))
    .toBe(0);
  const result = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa"]).analyze();
  const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  expect(serious.map((v) => `${where} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join("; ")})`)).toEqual([]);
}

/** Polls `check` until it holds. */
export async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Picks a language in the account menu, whose button reads `account` in the language shown. */
export async function chooseLanguage(page: Page, account: string, language: "English" | "한국어") {
  await page.getByRole("button", { name: account }).click();
  await page.getByRole("menuitem", { name: language }).click();
}

/** Signs `who` up through the API: their organization's id and a token. */
export async function apiSignUp(server: Server, who: { name: string; email: string; organization: string; password: string }) {
  const answer = await fetch(`${server.url}/api/v1/auth/signup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(who),
  });
  if (answer.status !== 201) throw new Error(`sign-up failed: ${answer.status} ${await answer.text()}`);
  const body = (await answer.json()) as { organization: { id: string }; access_token: string };
  return { org: body.organization.id, token: body.access_token };
}

export type Suite = {
  server: Server;
  browser: Browser;
  /** A fresh browser session whose problems fail the file at its end. */
  session: (viewport?: { width: number; height: number }, options?: BrowserContextOptions) => Promise<Session>;
};

/**
 * A test file's server and browser, started before its tests and stopped
 * after them, with every session's console errors and off-machine
 * requests failing the file.
 */
export function browserSuite(settings: Record<string, string> = {}): Suite {
  const sessions: Session[] = [];
  const suite = {
    session: async (viewport?: { width: number; height: number }, options: BrowserContextOptions = {}) => {
      const opened = await openSession(suite.browser, suite.server, viewport, [], options);
      sessions.push(opened);
      return opened;
    },
  } as Suite;
  beforeAll(async () => {
    suite.server = await startServer(settings);
    suite.browser = await launchBrowser();
  });
  afterAll(async () => {
    for (const s of sessions) expect(s.problems).toEqual([]);
    await suite.browser?.close();
    await suite.server?.stop();
  });
  return suite;
}

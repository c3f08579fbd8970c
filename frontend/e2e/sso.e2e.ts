// Single sign-on in the browser: a real OpenID provider (the certified
// oidc-provider package, run from tests/oidc) beside the server, the
// console's "Sign in with …" button, the way back signed in (the demo
// tenant, linked by verified email), and a refusal shown on the sign-in
// page in words.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { accessible, launchBrowser, openSession, screenshot, type Server, startServer } from "./harness";

const PROVIDER_DIR = resolve(import.meta.dirname, "..", "..", "tests", "oidc");
const SECRET = "a client secret for the browser tests";

let provider: ChildProcess;
let issuer: string;
let server: Server;
let browser: Browser;

async function startProvider(): Promise<string> {
  if (!existsSync(join(PROVIDER_DIR, "node_modules", "oidc-provider"))) {
    execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--silent"], { cwd: PROVIDER_DIR, stdio: "inherit" });
  }
  provider = spawn("node", [join(PROVIDER_DIR, "provider.mjs"), "gantry", SECRET], {
    cwd: PROVIDER_DIR,
    stdio: ["ignore", "pipe", "ignore"],
  });
  const port = await new Promise<string>((done, fail) => {
    provider.stdout?.once("data", (chunk: Buffer) => done(chunk.toString().trim()));
    provider.once("exit", (code) => fail(new Error(`the provider exited (${code})`)));
  });
  return `http://127.0.0.1:${port}`;
}

async function next(account: Record<string, unknown>) {
  const answer = await fetch(`${issuer}/control/next`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(account),
  });
  expect(answer.status).toBe(204);
}

beforeAll(async () => {
  issuer = await startProvider();
  const config = join(mkdtempSync(join(tmpdir(), "gantry-sso-")), "gantry.toml");
  writeFileSync(
    config,
    [
      "[[oidc_providers]]",
      'name = "corp"',
      'display_name = "Corp SSO"',
      `issuer_url = "${issuer}"`,
      'client_id = "gantry"',
      `client_secret = "${SECRET}"`,
      'allowed_domains = ["demo.gantry.dev"]',
      "",
    ].join("\n"),
  );
  server = await startServer({ GANTRY_CONFIG: config });
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  provider?.kill();
});

describe("single sign-on", () => {
  test("signs a user in through the provider and says why it refused one", async () => {
    const { page, problems } = await openSession(browser, server, undefined, [issuer]);
    await next({ sub: "tenant-1", email: "tenant@demo.gantry.dev", email_verified: true, name: "Demo Tenant" });
    await page.goto("/sign-in");
    await screenshot(page, "sso-sign-in");
    await page.getByRole("link", { name: "Sign in with Corp SSO" }).click();
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    // Linked by verified email to the demo tenant: their organization.
    expect(new URL(page.url()).origin).toBe(server.url);
    expect(new URL(page.url()).pathname).toMatch(/^\/orgs\/[0-9a-f-]{36}(\/|$)/);

    // Someone whose email the provider has not verified: back at the
    // sign-in page, told why, and not signed in.
    const { page: other, problems: otherProblems } = await openSession(browser, server, undefined, [issuer]);
    await next({ sub: "eve-1", email: "eve@demo.gantry.dev", email_verified: false });
    await other.goto("/sign-in");
    await other.getByRole("link", { name: "Sign in with Corp SSO" }).click();
    await other.getByText("Your email address is not verified at Corp SSO").waitFor();
    expect(new URL(other.url()).pathname).toBe("/sign-in");
    await screenshot(other, "sso-refused");
    await accessible(other, "sign-in with a refusal");
    const cookies = await other.context().cookies(server.url);
    expect(cookies.find((c) => c.name === "gantry_refresh")).toBeUndefined();
    expect([...problems, ...otherProblems]).toEqual([]);
  });
});

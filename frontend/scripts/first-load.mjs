// First load of the orders page against a running server, in Chromium with
// an empty cache each time: how long until the page is interactive and its
// orders are on screen, and how much JavaScript travelled.
//
//   node scripts/first-load.mjs http://127.0.0.1:8080 tenant@demo.gantry.dev 'gantry tenant demo' [runs]
import { chromium } from "playwright-core";

const [base, email, password, runsArg] = process.argv.slice(2);
if (!base || !email || !password) {
  console.error("usage: first-load.mjs BASE_URL EMAIL PASSWORD [RUNS]");
  process.exit(2);
}
const runs = Number(runsArg ?? 10);

async function json(path, init) {
  const answer = await fetch(`${base}/api/v1${path}`, init);
  if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
  return answer.json();
}
const login = await json("/auth/login", {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ email, password }),
});
const me = await json("/me", { headers: { authorization: `Bearer ${login.access_token}` } });
const org = me.memberships[0].organization.id;
const session = JSON.stringify({ token: login.access_token, expiresAt: Date.now() + login.expires_in * 1000 });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update"],
});
const samples = [];
for (let i = 0; i < runs; i++) {
  const context = await browser.newContext();
  await context.addInitScript((value) => localStorage.setItem("gantry.session", value), session);
  const page = await context.newPage();
  let jsBytes = 0;
  page.on("response", async (response) => {
    if (response.url().endsWith(".js")) jsBytes += Number((await response.headerValue("content-length")) ?? 0);
  });
  const started = Date.now();
  await page.goto(`${base}/orgs/${org}/orders`);
  await page.locator('table[aria-label="Orders"]').or(page.getByText("No orders here")).first().waitFor();
  const shown = Date.now() - started;
  const timing = await page.evaluate(() => {
    const [nav] = performance.getEntriesByType("navigation");
    return { interactive: nav.domInteractive, loaded: nav.loadEventEnd };
  });
  samples.push({ shown, ...timing, jsBytes });
  await context.close();
}
await browser.close();

const median = (key) => {
  const sorted = samples.map((s) => s[key]).sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};
const max = (key) => Math.max(...samples.map((s) => s[key]));
console.log(`runs: ${runs}, cold cache each`);
console.log(`DOM interactive:  median ${median("interactive").toFixed(0)} ms, max ${max("interactive").toFixed(0)} ms`);
console.log(`load event:       median ${median("loaded").toFixed(0)} ms, max ${max("loaded").toFixed(0)} ms`);
console.log(`orders on screen: median ${median("shown")} ms, max ${max("shown")} ms (from navigation, incl. API calls)`);
console.log(`JavaScript sent:  ${(median("jsBytes") / 1024).toFixed(1)} KB (gzip, as transferred)`);

// Every role sees only what it may do: for owner, admin, member, viewer and
// billing, each tenant page is walked; what it offers matches the role,
// what it may not read says so, and no page load draws a refusal (4xx)
// from the API.
import type { Page } from "playwright-core";
import { beforeAll, describe, expect, test } from "vitest";
import { accessible, apiCall, apiSignUp, apiToken, browserSuite, signIn, signUp } from "./harness";

const OWNER = { name: "Gina", email: "gina@example.com", organization: "Golf Robotics", password: "golf robotics passphrase" };
type Role = "admin" | "member" | "viewer" | "billing";
const ROLES: Role[] = ["admin", "member", "viewer", "billing"];
const person = (role: Role) => ({
  name: `A ${role}`,
  email: `${role}@golf.example.com`,
  organization: `${role} sandbox`,
  password: `golf robotics passphrase for the ${role.length} letter role`,
});

const suite = browserSuite();
let org = "";
let order = "";

/** Every refusal the API gives this page while it is used. */
function refusals(page: Page): string[] {
  const seen: string[] = [];
  page.on("response", (response) => {
    const path = new URL(response.url()).pathname;
    if (path.startsWith("/api/v1/") && response.status() >= 400 && response.status() < 500) {
      seen.push(`${response.status()} ${response.request().method()} ${path}`);
    }
  });
  return seen;
}

beforeAll(async () => {
  const owner = await suite.session();
  await signUp(owner.page, OWNER);
  org = new URL(owner.page.url()).pathname.split("/")[2] ?? "";
  const token = await apiToken(suite.server, OWNER);
  order = (await apiCall<{ id: string }>(suite.server, token, "POST", `/orgs/${org}/orders`, { instance_type: "h100x1" })).id;
  for (const role of ROLES) {
    await apiSignUp(suite.server, person(role));
    await apiCall(suite.server, token, "POST", `/orgs/${org}/members`, { email: person(role).email, role });
  }
});

type Expectation = { order: boolean; manage: boolean; billing: boolean };
const MATRIX: Record<"owner" | Role, Expectation> = {
  owner: { order: true, manage: true, billing: true },
  admin: { order: true, manage: true, billing: true },
  member: { order: true, manage: false, billing: false },
  viewer: { order: false, manage: false, billing: false },
  billing: { order: false, manage: false, billing: true },
};

async function walk(page: Page, role: "owner" | Role) {
  const can = MATRIX[role];
  const seen = refusals(page);
  const settled = async () => {
    await page.locator("main h2").first().waitFor();
    await expect.poll(() => page.locator("main .mantine-Loader-root:visible").count(), { timeout: 15_000 }).toBe(0);
  };
  const nav = page.getByRole("navigation");
  const visit = async (path: string) => {
    await page.goto(`/orgs/${org}${path}`);
    await settled();
  };

  await visit("");
  expect(await nav.getByRole("link", { name: "Launch", exact: true }).count(), `${role}: Launch in the navigation`).toBe(can.order ? 1 : 0);
  expect(await page.getByRole("main").getByRole("link", { name: "Launch GPUs" }).count(), `${role}: Launch on the overview`).toBe(can.order ? 1 : 0);
  for (const link of ["Usage", "Invoices", "SLA"]) {
    expect(await nav.getByRole("link", { name: link, exact: true }).count(), `${role}: ${link} in the navigation`).toBe(can.billing ? 1 : 0);
  }
  expect(await page.getByText("visible to billing roles").count(), `${role}: spend and balance`).toBe(can.billing ? 0 : 2);

  await visit("/launch");
  expect(await page.getByRole("button", { name: "Launch", exact: true }).count(), `${role}: the launch form`).toBe(can.order ? 1 : 0);
  if (!can.order) await page.getByText("Your role cannot launch").waitFor();

  await visit(`/orders/${order}`);
  expect(await page.getByRole("button", { name: "Cancel order" }).count(), `${role}: Cancel order`).toBe(can.order ? 1 : 0);
  if (!can.billing) await page.getByText("Usage and cost are visible to the owner, admins and billing roles.").waitFor();

  await visit("/reservations");
  expect(await page.getByRole("form", { name: "New reservation" }).count(), `${role}: the reservation form`).toBe(can.order ? 1 : 0);

  for (const path of ["/usage", "/invoices", "/sla"]) {
    await visit(path);
    expect(await page.getByText("Billing is not visible to your role").count(), `${role}: ${path}`).toBe(can.billing ? 0 : 1);
  }

  await visit("/settings");
  const tabs = page.getByRole("tablist");
  for (const tab of ["API keys", "Webhooks", "Registries"]) {
    expect(await tabs.getByRole("tab", { name: tab }).count(), `${role}: the ${tab} tab`).toBe(can.manage ? 1 : 0);
  }
  expect(await page.getByRole("textbox", { name: "Add or invite a member by email" }).count(), `${role}: the invitation form`).toBe(can.manage ? 1 : 0);
  expect(await page.getByRole("button", { name: "Remove" }).count() > 0, `${role}: Remove buttons`).toBe(can.manage);
  expect(await page.getByRole("textbox", { name: /^Role of / }).count() + (await page.getByRole("combobox", { name: /^Role of / }).count()) > 0, `${role}: role menus`).toBe(
    can.manage,
  );
  if (!can.manage) await page.getByTestId("read-only").waitFor();
  // Every role keeps its own SSH keys, from the navigation.
  await nav.getByRole("link", { name: "SSH keys" }).click();
  await page.getByRole("textbox", { name: "Public key" }).waitFor();
  expect(new URL(page.url()).searchParams.get("tab")).toBe("ssh");
  await accessible(page, `${role} ssh keys`);

  expect(seen, `${role}: refusals while walking the pages`).toEqual([]);
}

describe("roles", () => {
  test.each(["owner", ...ROLES] as const)("%s sees only what its role may do, and no page draws a refusal", async (role) => {
    const opened = await suite.session();
    await signIn(opened.page, role === "owner" ? OWNER : person(role));
    await opened.page.getByRole("heading", { name: "Overview" }).waitFor();
    await walk(opened.page, role);
  });

  test("an invited teammate signs up from the invitation's link, owns no organization and lands in the one that invited them", async () => {
    const owner = await suite.session();
    await signIn(owner.page, OWNER);
    await owner.page.getByRole("heading", { name: "Overview" }).waitFor();
    await owner.page.goto(`/orgs/${org}/settings`);
    const invited = "hank@golf.example.com";
    await owner.page.getByRole("textbox", { name: "Add or invite a member by email" }).fill(invited);
    await owner.page.getByRole("button", { name: "Add", exact: true }).click();
    const pending = owner.page.getByRole("table", { name: "Pending invitations" });
    await pending.getByText(invited).waitFor();
    await pending.getByRole("button", { name: "Copy sign-up link" }).waitFor();

    const hank = await suite.session();
    await hank.page.goto(`/sign-up?invited=${encodeURIComponent(invited)}`);
    await hank.page.getByTestId("invited").waitFor();
    expect(await hank.page.getByLabel("Organization").count()).toBe(0);
    expect(await hank.page.getByRole("textbox", { name: "Email", exact: true }).inputValue()).toBe(invited);
    await hank.page.getByLabel("Your name").fill("Hank");
    await hank.page.getByRole("textbox", { name: "Password", exact: true }).fill("a long passphrase nobody guesses");
    await hank.page.getByRole("button", { name: "Create account" }).click();
    await hank.page.getByRole("heading", { name: "Overview" }).waitFor();
    expect(new URL(hank.page.url()).pathname).toBe(`/orgs/${org}`);
    const me = await apiCall<{ memberships: { organization: { id: string }; role: string }[] }>(
      suite.server,
      await apiToken(suite.server, { email: invited, password: "a long passphrase nobody guesses" }),
      "GET",
      "/me",
    );
    expect(me.memberships).toEqual([expect.objectContaining({ organization: expect.objectContaining({ id: org }), role: "member" })]);
  });
});

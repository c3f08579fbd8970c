// What a tenant reads about its orders must be plain: why one waits (its
// organization by name, and what to do), an order the launch form will not
// let it make because the API would refuse it, and what happened to an
// order whose node an operator drained: each stop, requeue and move on its
// timeline, and a runtime that counts only running time. And what an
// operator declares for storage and capacity: a region's shared file
// system, and the Slurm cluster that runs a region.
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { accessible, apiCall, apiToken, browserSuite, chooseLanguage, instanceTypeId, OPERATOR, screenshot, signIn, signUp, until } from "./harness";

const DORA = { name: "Dora", email: "dora@example.com", organization: "Delta Dynamics", password: "delta dynamics passphrase" };
const ERIN = { name: "Erin", email: "erin@example.com", organization: "Echo Robotics", password: "echo robotics passphrase" };
const FINN = { name: "Finn", email: "finn@example.com", organization: "Foxtrot Vision", password: "foxtrot vision passphrase" };
const H100 = "H100-SXM-80GB";
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

type Order = {
  id: string;
  name: string;
  status: string;
  placement: { node_id: string; node_name: string }[];
  run_seconds: number;
  running_since: string | null;
};
type Node = { id: string; name: string; region: string; instance_type: string | null };

const suite = browserSuite();
const session = () => suite.session();

/** A new tenant's organization id and a token, after signing up in the browser. */
async function tenant(page: Page, who: typeof DORA): Promise<{ org: string; token: string }> {
  await signUp(page, who);
  const org = new URL(page.url()).pathname.split("/")[2] ?? "";
  return { org, token: await apiToken(suite.server, who) };
}

describe("what the console says about an order", () => {
  test("a waiting order names the quota as its organization's and says what to do; the operator reads the organization's name", async () => {
    const { page } = await session();
    const { org, token } = await tenant(page, DORA);
    const operator = await apiToken(suite.server, OPERATOR);
    await apiCall(suite.server, operator, "PUT", `/admin/orgs/${org}/quotas`, { quotas: [{ gpu_model: H100, guaranteed_gpus: 0, max_gpus: 8 }] });
    const order = { instance_type: "h100x8", region: "us-east" };
    await apiCall(suite.server, token, "POST", `/orgs/${org}/orders`, order);
    const waiting = await apiCall<Order>(suite.server, token, "POST", `/orgs/${org}/orders`, order);

    // In the list, the overview and the order's page: the quota is the
    // tenant's own, with what it can do, and no id in sight.
    await page.goto(`/orgs/${org}/orders`);
    const row = page.getByRole("table", { name: "Orders" }).getByRole("row").filter({ hasText: waiting.name });
    await expect.poll(() => row.textContent(), { timeout: 30_000 }).toContain(`Your organization's ${H100} quota is full`);
    expect(await row.textContent()).not.toMatch(UUID);
    await page.goto(`/orgs/${org}`);
    const active = page.getByRole("table", { name: "Active orders" }).getByRole("row").filter({ hasText: waiting.name });
    await expect.poll(() => active.textContent()).toContain(`Your organization's ${H100} quota is full`);
    await page.goto(`/orgs/${org}/orders/${waiting.id}`);
    const why = page.getByRole("alert").filter({ hasText: "Why it waits" });
    await expect.poll(() => why.textContent()).toContain("8 GPUs of 8 GPUs in use (the maximum), and this order needs 8 GPUs more.");
    expect(await why.textContent()).toContain("cancel one of them or ask your operator for a larger quota");
    expect(await why.textContent()).not.toMatch(UUID);
    await screenshot(page, "plain-quota-wait");

    await chooseLanguage(page, "Account", "한국어");
    const 사유 = page.getByRole("alert").filter({ hasText: "대기 사유" });
    await expect.poll(() => 사유.textContent()).toContain(`조직의 ${H100} 할당량이 가득 찼습니다`);
    expect(await 사유.textContent()).toContain("운영자에게 할당량 증설을 요청하세요");
    expect(await 사유.textContent()).not.toMatch(UUID);
    await accessible(page, "ko quota wait");

    const ops = await session();
    await signIn(ops.page, OPERATOR);
    await ops.page.getByRole("link", { name: "Queues" }).click();
    const queue = ops.page.getByRole("table", { name: `Queue of ${DORA.organization}` });
    await expect.poll(() => queue.getByRole("row").filter({ hasText: waiting.name }).textContent(), { timeout: 30_000 }).toContain(
      `${DORA.organization}'s ${H100} quota is full`,
    );
    expect(await queue.textContent()).not.toMatch(UUID);
  });

  test("the launch form does not offer what the API refuses: spot locks preemptible, a shared GPU one node", async () => {
    const { page } = await session();
    const { org, token } = await tenant(page, ERIN);
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100x1 / }).click();
    await page.getByText("spot", { exact: true }).click();
    const priority = page.getByRole("combobox", { name: "Priority" });
    await expect.poll(() => priority.inputValue()).toBe("preemptible");
    expect(await priority.isDisabled()).toBe(true);
    await page.getByText("Spot capacity is always preemptible").waitFor();
    await accessible(page, "spot launch");
    // Reserved capacity without a reservation: the way to make one, not a dead end.
    await page.getByText("reserved", { exact: true }).click();
    await page.getByRole("link", { name: "You hold no reservation now: reserve capacity first →" }).waitFor();
    await page.getByText("spot", { exact: true }).click();
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByRole("heading", { name: /^h100x1-/ }).waitFor();
    const orderId = new URL(page.url()).pathname.split("/").at(-1) ?? "";
    const placed = await apiCall<{ pricing_class: string; priority_class: string }>(suite.server, token, "GET", `/orgs/${org}/orders/${orderId}`);
    expect(placed).toMatchObject({ pricing_class: "spot", priority_class: "preemptible" });

    // A share of one GPU runs on one node: the node count is fixed at 1.
    await page.getByRole("link", { name: "Launch", exact: true }).first().click();
    const nodes = page.getByRole("textbox", { name: "Nodes" });
    await nodes.fill("2");
    await page.getByRole("combobox", { name: "Instance type" }).click();
    await page.getByRole("option", { name: /^h100-quarter / }).click();
    await expect.poll(() => nodes.inputValue()).toBe("1");
    expect(await nodes.isDisabled()).toBe(true);
    await page.getByText("A share of one GPU runs on one node.").waitFor();
  });

  test("a drained node's instance: the timeline shows the stop with why, the requeue and the move; runtime stops while it waits", async () => {
    const { page } = await session();
    const { org, token } = await tenant(page, FINN);
    const operator = await apiToken(suite.server, OPERATOR);
    const order = await apiCall<Order>(suite.server, token, "POST", `/orgs/${org}/orders`, { instance_type: "l40sx4", region: "eu-central" });
    let current = order;
    await until("the instance runs", async () => {
      current = await apiCall<Order>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`);
      return current.status === "running";
    });
    const first = current.placement[0]?.node_name ?? "";
    // Nowhere else to go: every other node of its shape is cordoned.
    const nodes = (await apiCall<{ items: Node[] }>(suite.server, operator, "GET", "/admin/nodes?limit=200")).items;
    const others = nodes.filter((n) => n.name !== first && n.region === "eu-central" && n.instance_type === "l40sx4");
    expect(others.length).toBeGreaterThan(0);
    for (const n of others) await apiCall(suite.server, operator, "POST", `/admin/nodes/${n.id}/cordon`, {});

    // The operator drains it from the console, as an operator would.
    const ops = await session();
    await signIn(ops.page, OPERATOR);
    await ops.page.getByRole("link", { name: "Queues" }).waitFor();
    await ops.page.goto(`/admin/nodes/${current.placement[0]?.node_id ?? ""}`);
    await ops.page.getByRole("button", { name: "Drain" }).click();
    await ops.page.getByRole("dialog").getByText(FINN.organization).waitFor();
    await ops.page.getByRole("dialog").getByRole("button", { name: "Drain" }).click();

    await page.goto(`/orgs/${org}/orders/${order.id}`);
    const timeline = page.getByTestId("order-timeline");
    await timeline.getByText("Queued again").waitFor({ timeout: 30_000 });
    expect(await timeline.textContent()).toContain(`Its node ${first} was drained for maintenance by the operator.`);
    expect(await timeline.textContent()).toContain(`Placed on ${first}`);
    await page.getByText("Not placed now: it waits in the queue for GPUs again.").waitFor();
    expect(await page.getByText("Its GPUs are being released.").count()).toBe(0);
    // Waiting is not running: the runtime holds still.
    const runtime = page.getByText("Runtime", { exact: true }).locator("xpath=following-sibling::*[1]");
    const held = await runtime.textContent();
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await runtime.textContent()).toBe(held);
    const waiting = await apiCall<Order>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`);
    expect(waiting.running_since).toBeNull();
    expect(waiting.run_seconds).toBeGreaterThanOrEqual(0);
    await screenshot(page, "plain-drained-waiting");
    await accessible(page, "drained order");

    // Room elsewhere: it moves, and says so.
    for (const n of others) await apiCall(suite.server, operator, "POST", `/admin/nodes/${n.id}/uncordon`, {});
    await timeline.getByText(/^Moved to .* \(from /).waitFor({ timeout: 30_000 });
    const moved = await apiCall<Order>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`);
    const second = moved.placement[0]?.node_name ?? "";
    expect(second).not.toBe(first);
    expect(await timeline.textContent()).toContain(`Moved to ${second} (from ${first})`);
    expect(await timeline.textContent()).toContain("Its SSH host and ports are now on the new node.");
    await until("the moved instance runs", async () =>
      (await apiCall<Order>(suite.server, token, "GET", `/orgs/${org}/orders/${order.id}`)).status === "running",
    );
    await screenshot(page, "plain-drained-moved");
  });

  test("a price change set for later stays in view, in the operator's zone, and can be withdrawn", async () => {
    const ops = await session();
    await signIn(ops.page, OPERATOR);
    await ops.page.getByRole("link", { name: "Queues" }).waitFor();
    await ops.page.goto("/admin/catalog");
    const form = ops.page.locator("form").filter({ has: ops.page.getByRole("button", { name: "Add price" }) });
    await form.getByRole("combobox", { name: "Instance type" }).click();
    await ops.page.getByRole("option", { name: "l40sx1", exact: true }).click();
    await form.getByRole("textbox", { name: "Per node-hour" }).fill("1.77");
    const later = new Date(Date.now() + 3 * 86_400_000);
    const wall = `${later.toISOString().slice(0, 10)}T09:00`;
    // The browser runs in UTC here, so the zone named is UTC.
    await form.getByLabel("Effective from (UTC)").fill(wall);
    await form.getByRole("button", { name: "Add price" }).click();
    await ops.page.getByText("Price version added.").waitFor();
    const versions = ops.page.getByRole("table", { name: "Price versions of l40sx1" });
    const row = versions.getByRole("row").filter({ hasText: "$1.77" });
    await row.waitFor();
    expect(await row.textContent()).toContain("scheduled");
    expect(await row.textContent()).toContain("09:00 AM UTC");
    expect(await versions.getByText("in force").count()).toBeGreaterThan(0);
    // The chosen type stays chosen, whole, for the next version.
    expect(await form.getByRole("combobox", { name: "Instance type" }).inputValue()).toBe("l40sx1");

    // A change set for later can be withdrawn; a price in force cannot.
    expect(await versions.getByRole("row").filter({ hasText: "in force" }).getByRole("button").count()).toBe(0);
    await row.getByRole("button", { name: /^Withdraw \$1\.77 from / }).click();
    const confirm = ops.page.getByRole("dialog", { name: "Withdraw this scheduled price?" });
    await confirm.getByText("the price in force now stays").waitFor();
    await confirm.getByRole("button", { name: "Withdraw" }).click();
    await ops.page.getByText("Scheduled price withdrawn.").waitFor();
    await row.waitFor({ state: "detached" });
    const token = await apiToken(suite.server, OPERATOR);
    const l40s = await instanceTypeId(suite.server, token, "l40sx1");
    const left = await apiCall<{ hourly_micros: number }[]>(suite.server, token, "GET", `/catalog/instance-types/${l40s}/prices`);
    expect(left.map((p) => p.hourly_micros)).not.toContain(1_770_000);
  });

  test("an operator declares a region's shared file system, refused first where the path is not absolute", async () => {
    const ops = await session();
    await signIn(ops.page, OPERATOR);
    await ops.page.getByRole("link", { name: "Queues" }).waitFor();
    await ops.page.goto("/admin/catalog");
    await ops.page.getByText("No region has a shared file system yet").waitFor();
    const form = ops.page.locator("form").filter({ has: ops.page.getByRole("button", { name: "Declare" }) });
    await form.getByRole("combobox", { name: "Region" }).click();
    const region = ops.page.getByRole("option").first();
    const name = (await region.textContent()) ?? "";
    await region.click();
    await form.getByRole("textbox", { name: "Mount path on every node" }).fill("mnt/shared");
    await form.getByRole("button", { name: "Declare" }).click();
    await form.getByText("An absolute path, such as /mnt/shared").waitFor();
    await form.getByRole("textbox", { name: "Mount path on every node" }).fill("/mnt/shared");
    await form.getByRole("button", { name: "Declare" }).click();
    await ops.page.getByText(`Region ${name} keeps shared volumes now`).waitFor();
    const row = ops.page.getByRole("table", { name: "Shared file systems" }).getByRole("row").filter({ hasText: "/mnt/shared" });
    await row.waitFor();
    expect(await row.textContent()).toContain(name);
    expect(await row.textContent()).toContain("from id 2000000000");
    const token = await apiToken(suite.server, OPERATOR);
    const declared = await apiCall<{ region: string; kind: string; mount_path: string }[]>(suite.server, token, "GET", "/admin/shared-file-systems");
    expect(declared).toEqual([expect.objectContaining({ region: name, kind: "glusterfs", mount_path: "/mnt/shared" })]);
  });

  test("an operator fronts a Slurm cluster with a region, refused first where the partition could read as an option", async () => {
    const ops = await session();
    await signIn(ops.page, OPERATOR);
    await ops.page.getByRole("link", { name: "Queues" }).waitFor();
    await ops.page.goto("/admin/catalog");
    await ops.page.getByText("No region is run by a Slurm cluster.").waitFor();
    const form = ops.page.locator("form").filter({ has: ops.page.getByRole("button", { name: "Front the cluster" }) });
    await form.getByRole("combobox", { name: "Region" }).click();
    const region = ops.page.getByRole("option").last();
    const name = (await region.textContent()) ?? "";
    await region.click();
    await form.getByRole("combobox", { name: "GPU model" }).click();
    const model = ops.page.getByRole("option").first();
    const modelName = (await model.textContent()) ?? "";
    await model.click();
    await form.getByRole("textbox", { name: "Its GRES type" }).fill("h100");
    await form.getByRole("textbox", { name: "Output directory" }).fill("/srv/gantry-output");
    await form.getByRole("textbox", { name: "Partition" }).fill("--all");
    await form.getByRole("button", { name: "Front the cluster" }).click();
    await form.getByText("Letters, digits, '_', '.' and '-', not starting with '-'").waitFor();
    await form.getByRole("textbox", { name: "Partition" }).fill("gpu");
    await form.getByRole("button", { name: "Front the cluster" }).click();
    await ops.page.getByText(`Slurm runs region ${name} now`).waitFor();
    const row = ops.page.getByRole("table", { name: "Slurm clusters" }).getByRole("row").filter({ hasText: name });
    await row.waitFor();
    expect(await row.textContent()).toContain(`${modelName} → h100`);
    // Whom to make on the nodes: each organization's own user.
    await row.getByRole("button", { name: "Unix users" }).click();
    const users = ops.page.getByRole("table", { name: `Unix users of region ${name}` });
    await users.getByRole("row").nth(1).waitFor();
    const listed = await users.getByRole("row").allTextContents();
    expect(listed.slice(1).every((r) => /gantry-[0-9a-f]{12}$/.test(r))).toBe(true);
    const token = await apiToken(suite.server, OPERATOR);
    const declared = await apiCall<{ region: string; partition: string; output_dir: string; access: string }[]>(
      suite.server,
      token,
      "GET",
      "/admin/slurm-clusters",
    );
    expect(declared).toEqual([
      expect.objectContaining({ region: name, partition: "gpu", output_dir: "/srv/gantry-output", access: "srun" }),
    ]);
  });
});

// The operator's capacity picture from the node list: who holds each GPU,
// and how much of what is free can actually be placed.
import type { Schemas } from "../api/client";
import { i18n } from "../i18n";

type Node = Schemas["Node"];

export const SHAPES = [1, 2, 4, 8] as const;

export type ModelCapacity = {
  model: string;
  total: number;
  /** Healthy GPUs nobody holds, on any node. */
  free: number;
  /** Free GPUs on nodes that accept work (ready). */
  schedulable: number;
  /** How many single-node instances of each GPU count fit right now. */
  placeable: Record<number, number>;
  /** The largest GPU count one node can still take. */
  largest: number;
};

/** One tenant's part of a shared GPU, as a share of the whole (0–1). */
export type SharePart = { orgId: string | null; orderId: string; share: number; label: string };

export type GpuCell =
  | { kind: "free"; mig: boolean }
  | { kind: "held"; orgId: string | null; orderId: string }
  | { kind: "shared"; parts: SharePart[]; mig: boolean }
  | { kind: "unhealthy" }
  /** Held by work the node's cluster manager runs that Gantry did not place. */
  | { kind: "outside" };

const EIGHTHS = ["", "⅛", "¼", "⅜", "½", "⅝", "¾", "⅞"];

/** A fraction of a GPU in thousandths, as people say it: ¼, ½, ⅜. */
export function fraction(milli: number): string {
  const eighths = milli / 125;
  return Number.isInteger(eighths) && EIGHTHS[eighths] ? EIGHTHS[eighths] : `${milli / 10}%`;
}

/** What an instance type or order gets of its GPUs, in words. */
export function gpuShape(t: {
  gpus_per_node: number;
  gpu_model: string;
  gpu_milli?: number | null;
  mig_profile?: string | null;
}): string {
  if (t.mig_profile) return i18n.t("shape.mig", { profile: t.mig_profile, model: t.gpu_model });
  if (t.gpu_milli) return i18n.t("shape.fraction", { fraction: fraction(t.gpu_milli), model: t.gpu_model });
  return i18n.t("shape.whole", { count: t.gpus_per_node, model: t.gpu_model });
}

export function cellOf(gpu: Schemas["NodeGpu"]): GpuCell {
  if (!gpu.healthy) return { kind: "unhealthy" };
  if (gpu.held_outside) return { kind: "outside" };
  if (gpu.order_id) return { kind: "held", orgId: gpu.org_id ?? null, orderId: gpu.order_id };
  const instances = gpu.mig_devices.length;
  if (gpu.shares.length > 0) {
    const parts = gpu.shares.map((s) => {
      const profile = gpu.mig_devices.find((d) => d.uuid === s.mig_device)?.profile;
      return {
        orgId: s.org_id ?? null,
        orderId: s.order_id,
        share: gpu.mig_enabled ? 1 / Math.max(instances, 1) : s.units / 1000,
        label: gpu.mig_enabled ? `MIG ${profile ?? `${s.units}g`}` : fraction(s.units),
      };
    });
    return { kind: "shared", parts, mig: gpu.mig_enabled };
  }
  return { kind: "free", mig: gpu.mig_enabled };
}

/** A shared GPU's fill: each tenant's colour over its share, bottom up. */
export function shareBackground(parts: SharePart[]): string {
  let at = 0;
  const stops = parts.map((p) => {
    const from = at;
    at = Math.min(1, at + p.share);
    const colour = p.orgId ? tenantColour(p.orgId) : "var(--mantine-color-gray-6)";
    return `${colour} ${(from * 100).toFixed(1)}% ${(at * 100).toFixed(1)}%`;
  });
  return `linear-gradient(to top, ${[...stops, `transparent ${(at * 100).toFixed(1)}%`].join(", ")})`;
}

/** GPUs a whole-GPU order could take: healthy, unheld (by Gantry or outside it), unshared, not MIG. */
function freeGpus(node: Node): number {
  return node.gpus.filter(
    (g) => g.healthy && !g.held_outside && !g.order_id && g.shares.length === 0 && !g.mig_enabled,
  ).length;
}

export type NodeUse = {
  /** GPUs held whole by one order. */
  whole: number;
  /** GPUs in use by fractions or MIG instances. */
  shared: number;
  /** GPUs a whole-GPU order could take now. */
  free: number;
  unhealthy: number;
  /** Orders on the node, whole or sharing. */
  orders: number;
  /** MIG instances on the node, and how many nobody holds; null without MIG. */
  mig: { total: number; free: number } | null;
};

/** What a node's GPUs are used for, counting shared and MIG work as work. */
export function nodeUse(node: Node): NodeUse {
  const orders = new Set<string>();
  let whole = 0;
  let shared = 0;
  let unhealthy = 0;
  let migTotal = 0;
  let migHeld = 0;
  for (const g of node.gpus) {
    if (g.order_id) orders.add(g.order_id);
    for (const s of g.shares) orders.add(s.order_id);
    if (!g.healthy) unhealthy += 1;
    else if (g.order_id) whole += 1;
    else if (g.shares.length > 0) shared += 1;
    if (g.mig_enabled) {
      migTotal += g.mig_devices.length;
      migHeld += g.shares.filter((s) => s.mig_device).length;
    }
  }
  const anyMig = node.gpus.some((g) => g.mig_enabled);
  return {
    whole,
    shared,
    free: freeGpus(node),
    unhealthy,
    orders: orders.size,
    mig: anyMig ? { total: migTotal, free: Math.max(0, migTotal - migHeld) } : null,
  };
}

export function capacityByModel(nodes: Node[]): ModelCapacity[] {
  const byModel = new Map<string, ModelCapacity>();
  for (const node of nodes) {
    const model = node.gpus[0]?.model;
    if (!model) continue;
    const entry = byModel.get(model) ?? {
      model,
      total: 0,
      free: 0,
      schedulable: 0,
      placeable: Object.fromEntries(SHAPES.map((s) => [s, 0])),
      largest: 0,
    };
    const free = freeGpus(node);
    entry.total += node.gpus.length;
    entry.free += free;
    if (node.state === "ready") {
      entry.schedulable += free;
      entry.largest = Math.max(entry.largest, free);
      for (const shape of SHAPES) entry.placeable[shape] = (entry.placeable[shape] ?? 0) + Math.floor(free / shape);
    }
    byModel.set(model, entry);
  }
  return [...byModel.values()].sort((a, b) => a.model.localeCompare(b.model));
}

export type NodeGroup = {
  key: string;
  region: string;
  rack: string;
  /** Nodes shown one by one. */
  nodes: Node[];
  /** Ready nodes with every GPU free and none reserved, folded by instance type. */
  idle: { instanceType: string; count: number; gpus: number }[];
};

/** Nodes by region and rack, identical idle nodes folded into one line. */
export function groupNodes(nodes: Node[]): NodeGroup[] {
  const groups = new Map<string, NodeGroup>();
  const sorted = [...nodes].sort((a, b) =>
    `${a.region}/${a.rack}/${a.name}`.localeCompare(`${b.region}/${b.rack}/${b.name}`),
  );
  for (const node of sorted) {
    const key = `${node.region}/${node.rack || "—"}`;
    const group = groups.get(key) ?? { key, region: node.region, rack: node.rack || "—", nodes: [], idle: [] };
    const idle =
      node.state === "ready" &&
      node.gpus.length > 0 &&
      freeGpus(node) === node.gpus.length &&
      node.reservations.length === 0;
    // MIG nodes are never folded: their GPUs sell differently.
    if (idle) {
      const type = node.instance_type ?? `${node.gpus.length}× ${node.gpus[0]?.model ?? "GPU"}`;
      const fold = group.idle.find((f) => f.instanceType === type);
      if (fold) fold.count += 1;
      else group.idle.push({ instanceType: type, count: 1, gpus: node.gpus.length });
    } else {
      group.nodes.push(node);
    }
    groups.set(key, group);
  }
  return [...groups.values()];
}

/** The first reservation holding GPU `index` of `node`, now or later. */
export function reservationOn(node: Node, index: number): Node["reservations"][number] | undefined {
  return node.reservations.find((r) => r.gpu_ids.includes(index));
}

/** A stable colour per organization, so a tenant keeps its colour. */
export function tenantColour(orgId: string): string {
  let hash = 0;
  for (const ch of orgId) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  return `hsl(${hash % 360} 65% 45%)`;
}

/** A node's state as people read it: a draining node that holds no work any more is drained. */
export function nodeState(node: Node): string {
  const holds = node.gpus.some((g) => g.order_id || g.shares.length > 0);
  return node.state === "draining" && !holds ? "drained" : node.state;
}

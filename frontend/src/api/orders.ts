// Orders of one organization: lists, one order, and cancel, refreshed while
// anything is still moving.
import { useInfiniteQuery, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "./client";
import { keys } from "./queries";
import { TERMINAL } from "../components/StatusBadge";
import { gpuShape } from "../lib/capacity";
import { i18n } from "../i18n";

export type Order = Schemas["Order"];
type OrderStatus = Schemas["OrderStatus"];

const LIVE_REFRESH_MS = 2_000;
const IDLE_REFRESH_MS = 15_000;

export function useOrders(orgId: string, status?: OrderStatus, arrayId?: string) {
  return useInfiniteQuery({
    queryKey: keys.org(orgId, "orders", status ?? "all", arrayId ?? "any"),
    queryFn: ({ pageParam }) =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/orders", {
          params: { path: { org_id: orgId }, query: { limit: 50, cursor: pageParam, status, array_id: arrayId } },
        }),
      ),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
    refetchInterval: (query) =>
      query.state.data?.pages.some((p) => p.items.some((o) => !settled(o)))
        ? LIVE_REFRESH_MS
        : IDLE_REFRESH_MS,
  });
}

export function useOrder(orgId: string, orderId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "order", orderId),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/orders/{order_id}", {
          params: { path: { org_id: orgId, order_id: orderId } },
        }),
      ),
    refetchInterval: (query) => (query.state.data && settled(query.state.data) ? false : LIVE_REFRESH_MS),
  });
}

/**
 * Whether nothing about the order will change: it has ended and its GPUs
 * are released. A cancelled order is final at once but keeps its GPUs
 * until its work has stopped, and only then has an end time.
 */
export function settled(order: Order): boolean {
  return TERMINAL.has(order.status) && Boolean(order.ended_at);
}

/** How long after an order ended its metered usage may still grow. */
export const METERING_SETTLE_MS = 60_000;

export function useCancelOrder(orgId: string) {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (orderId: string) =>
      unwrap(
        api.POST("/api/v1/orgs/{org_id}/orders/{order_id}/cancel", {
          params: { path: { org_id: orgId, order_id: orderId } },
        }),
      ),
    onSuccess: (order) => {
      queryClient.setQueryData(keys.org(orgId, "order", order.id), order);
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "orders") });
    },
  });
}

/**
 * Seconds the order has run (or ran): its attempts' running time, without
 * the time it waited in the queue between them. Null before it first ran.
 */
export function runtimeSeconds(order: Order, now = Date.now()): number | null {
  if (!order.started_at && order.run_seconds === 0) return null;
  const current = order.running_since ? Math.max(0, now - Date.parse(order.running_since)) / 1000 : 0;
  return order.run_seconds + current;
}

/** A MIG GPU's compute slices: a `3g.40gb` instance is three of them. */
const MIG_SLICES = 7;

/**
 * How many GPUs it takes, shares counted as the part of a GPU they are (a
 * quarter as 0.25, MIG `1g.10gb` as 1/7), to two decimals.
 */
export function gpuCount(order: Pick<Order, "gpus_per_node" | "node_count" | "gpu_milli" | "mig_profile">): number {
  const slices = Number(/^(\d+)g\./.exec(order.mig_profile ?? "")?.[1] ?? 0);
  const perNode = order.mig_profile ? slices / MIG_SLICES : order.gpu_milli ? order.gpu_milli / 1000 : order.gpus_per_node;
  return Math.round(perNode * order.node_count * 100) / 100;
}

/** Where it runs, or was asked to: `eu-central`, `any (runs in us-east)`, `any`. */
export function regionOf(order: Order): string {
  if (order.region) return order.region;
  const running = [...new Set(order.placement.map((p) => p.region))].join(", ");
  return running ? i18n.t("shape.regionRuns", { regions: running }) : i18n.t("shape.regionAny");
}

/** Its GPUs in words: `16 × H100`, `¼ of one H100`, `MIG 1g.10gb of one H100`. */
export function gpusOf(order: Order): string {
  return gpuShape({ ...order, gpus_per_node: gpuCount(order) });
}

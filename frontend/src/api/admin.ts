// Operator data that spans every tenant.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "./client";
import { keys } from "./queries";

const MAX_PAGE = 200;

/** Every node, all pages: the capacity map needs the whole fleet. */
export function useAllNodes(refetchInterval = 5_000) {
  return useQuery({
    queryKey: keys.admin("nodes"),
    queryFn: async () => {
      const nodes: Schemas["Node"][] = [];
      let cursor: string | undefined;
      do {
        const page = await unwrap(api.GET("/api/v1/admin/nodes", { params: { query: { limit: MAX_PAGE, cursor } } }));
        nodes.push(...page.items);
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      return nodes;
    },
    refetchInterval,
  });
}

type NodeAction = "cordon" | "drain" | "uncordon";

export function useNodeAction() {
  const queryClient = useQueryClient();
  return useMutation({
    // `force` takes the node out of service although reservations hold its GPUs.
    mutationFn: ({ nodeId, action, force = false, reason }: { nodeId: string; action: NodeAction; force?: boolean; reason?: string }) => {
      const path = { node_id: nodeId };
      const query = { force, reason: reason?.trim() || undefined };
      switch (action) {
        case "cordon":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/cordon", { params: { path, query } }));
        case "drain":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/drain", { params: { path, query } }));
        case "uncordon":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/uncordon", { params: { path } }));
      }
    },
    // The answer is the node as it is now: its own page shows it at once.
    onSuccess: (node) => {
      queryClient.setQueryData(keys.admin("node", node.id), node);
      void queryClient.invalidateQueries({ queryKey: keys.admin("nodes") });
    },
  });
}

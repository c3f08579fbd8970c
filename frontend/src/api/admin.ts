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
    mutationFn: ({ nodeId, action, force = false }: { nodeId: string; action: NodeAction; force?: boolean }) => {
      const path = { node_id: nodeId };
      switch (action) {
        case "cordon":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/cordon", { params: { path, query: { force } } }));
        case "drain":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/drain", { params: { path, query: { force } } }));
        case "uncordon":
          return unwrap(api.POST("/api/v1/admin/nodes/{node_id}/uncordon", { params: { path } }));
      }
    },
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: keys.admin("nodes") }),
  });
}

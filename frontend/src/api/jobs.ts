// Jobs: attempts, captured output (fetched after the last line seen, while
// the job runs), an array's members by status and cancelling a whole array.
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useRef } from "react";
import { api, ApiError, type Schemas, unwrap } from "./client";
import { keys } from "./queries";
import { TERMINAL } from "../components/StatusBadge";

const OUTPUT_REFRESH_MS = 1_500;
const LINES_KEPT = 5_000;

/** `stage` changes when the order does (its status, then its end): each change reads the attempts again. */
export function useAttempts(orgId: string, orderId: string, live: boolean, stage: string) {
  return useQuery({
    queryKey: keys.org(orgId, "attempts", orderId, stage),
    placeholderData: keepPreviousData,
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/orders/{order_id}/attempts", {
          params: { path: { org_id: orgId, order_id: orderId } },
        }),
      ),
    refetchInterval: live ? 3_000 : false,
  });
}

/** The job's output so far, growing while it runs; the newest lines kept. */
export function useOutput(orgId: string, orderId: string) {
  // Lines already read stay here; each fetch asks only for newer ones.
  const store = useRef({ orderId, after: 0, lines: [] as Schemas["LogLine"][] });
  return useQuery({
    queryKey: keys.org(orgId, "output", orderId),
    queryFn: async () => {
      if (store.current.orderId !== orderId) store.current = { orderId, after: 0, lines: [] };
      const answer = await unwrap(
        api.GET("/api/v1/orgs/{org_id}/orders/{order_id}/logs", {
          params: { path: { org_id: orgId, order_id: orderId }, query: { after: store.current.after, limit: 1000 } },
        }),
      );
      // Without `follow` the answer is a page, never an event.
      if (!("lines" in answer)) throw new ApiError(0, { detail: "the server answered an event stream" });
      const page = answer;
      if (page.lines.length > 0) {
        store.current.lines = [...store.current.lines, ...page.lines].slice(-LINES_KEPT);
        store.current.after = page.next_after ?? store.current.after;
      }
      return { lines: store.current.lines, truncated: page.truncated, ended: page.ended };
    },
    refetchInterval: (query) => (query.state.data?.ended ? false : OUTPUT_REFRESH_MS),
  });
}

/** An array's members counted by status, refreshed until every one has ended. */
export function useArraySummary(orgId: string, arrayId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "array", arrayId),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/job-arrays/{array_id}", {
          params: { path: { org_id: orgId, array_id: arrayId } },
        }),
      ),
    refetchInterval: (query) => (query.state.data?.by_status.every((s) => TERMINAL.has(s.status)) ? false : 3_000),
  });
}

export function useCancelArray(orgId: string) {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (arrayId: string) =>
      unwrap(
        api.POST("/api/v1/orgs/{org_id}/job-arrays/{array_id}/cancel", {
          params: { path: { org_id: orgId, array_id: arrayId } },
        }),
      ),
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId) }),
  });
}

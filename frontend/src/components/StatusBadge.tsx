import { Badge } from "@mantine/core";
import { words } from "../lib/format";

const COLOURS: Record<string, string> = {
  queued: "yellow",
  scheduled: "blue",
  provisioning: "cyan",
  running: "green",
  completed: "gray",
  cancelled: "gray",
  failed: "red",
  preempted: "orange",
  ready: "green",
  cordoned: "yellow",
  draining: "orange",
  unhealthy: "red",
  draft: "yellow",
  finalized: "blue",
  paid: "green",
  void: "gray",
};

export function StatusBadge({ status }: { status: string }) {
  return (
    // Never narrower than its word: a table column squeezes it otherwise.
    <Badge color={COLOURS[status] ?? "gray"} variant="filled" miw="max-content">
      {words(status)}
    </Badge>
  );
}

export const TERMINAL = new Set(["completed", "failed", "cancelled", "timed_out"]);

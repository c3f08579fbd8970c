import { Badge, type MantineSize } from "@mantine/core";
import { words } from "../lib/format";

// Light shades: the theme's automatic contrast puts black text on them,
// which meets WCAG AA at badge size where white on a mid shade does not.
const COLOURS: Record<string, string> = {
  queued: "yellow.4",
  scheduled: "blue.3",
  provisioning: "cyan.3",
  running: "green.4",
  completed: "gray.3",
  cancelled: "gray.3",
  timed_out: "red.4",
  failed: "red.4",
  preempted: "orange.4",
  ready: "green.4",
  cordoned: "yellow.4",
  draining: "orange.4",
  drained: "gray.3",
  unhealthy: "red.4",
  draft: "yellow.4",
  finalized: "blue.3",
  paid: "green.4",
  void: "gray.3",
  upcoming: "blue.3",
  active: "green.4",
  ended: "gray.3",
  confirmed: "blue.3",
  creating: "cyan.3",
  available: "green.4",
  attached: "blue.3",
  deleting: "gray.3",
};

export function StatusBadge({ status, size }: { status: string; size?: MantineSize }) {
  return (
    // Never narrower than its word: a table column squeezes it otherwise.
    <Badge color={COLOURS[status] ?? "gray.3"} variant="filled" miw="max-content" size={size}>
      {words(status)}
    </Badge>
  );
}

export const TERMINAL = new Set(["completed", "failed", "cancelled", "timed_out"]);

import { Button, Group } from "@mantine/core";
import { useNodeAction } from "../../api/admin";
import type { Schemas } from "../../api/client";
import { ConfirmButton } from "../../components/ConfirmButton";
import { notifyError, notifySuccess } from "../../lib/notify";

/** Cordon (no new work), drain (move work off) and return to service. */
export function NodeActions({ node }: { node: Schemas["Node"] }) {
  const act = useNodeAction();
  const run = (action: "cordon" | "drain" | "uncordon") =>
    act.mutate(
      { nodeId: node.id, action },
      {
        onSuccess: (n) => notifySuccess(`${n.name} is ${n.state}.`),
        onError: (error) => notifyError(error),
      },
    );
  const held = node.gpus.filter((g) => g.order_id).length;
  return (
    <Group gap="xs" wrap="nowrap">
      {node.state === "ready" && (
        <Button size="xs" variant="default" onClick={() => run("cordon")} loading={act.isPending}>
          Cordon
        </Button>
      )}
      {(node.state === "ready" || node.state === "cordoned") && (
        <ConfirmButton
          size="xs"
          label="Drain"
          title={`Drain ${node.name}?`}
          message={
            held > 0
              ? `${held} GPUs are in use. Their work is stopped and requeued (development instances fail) and the node takes no new work.`
              : "The node takes no new work until it is returned to service."
          }
          confirmLabel="Drain"
          onConfirm={() => run("drain")}
        />
      )}
      {node.state !== "ready" && node.state !== "unhealthy" && (
        <Button size="xs" variant="light" onClick={() => run("uncordon")} loading={act.isPending}>
          Return to service
        </Button>
      )}
    </Group>
  );
}

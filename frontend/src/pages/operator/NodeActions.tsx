import { Badge, Button, Group } from "@mantine/core";
import { useMutation } from "@tanstack/react-query";
import { useNodeAction } from "../../api/admin";
import { api, type Schemas, unwrap } from "../../api/client";
import { ConfirmButton } from "../../components/ConfirmButton";
import { notifyError, notifySuccess } from "../../lib/notify";

/** Cordon (no new work), drain (move work off) and return to service. */
export function NodeActions({ node }: { node: Schemas["Node"] }) {
  const act = useNodeAction();
  // Reservations on the node are named in the confirmation, and taking
  // it out of service then breaks them knowingly.
  const reserved = node.reservations.map((r) => r.name);
  const breaks = reserved.length
    ? ` It holds GPUs of reservations ${reserved.join(", ")}; they can no longer be honoured.`
    : "";
  const run = (action: "cordon" | "drain" | "uncordon") =>
    act.mutate(
      { nodeId: node.id, action, force: reserved.length > 0 },
      {
        onSuccess: (n) => notifySuccess(`${n.name} is ${n.state}.`),
        onError: (error) => notifyError(error),
      },
    );
  const held = node.gpus.filter((g) => g.order_id).length;
  return (
    <Group gap="xs" wrap="nowrap">
      {node.state === "ready" &&
        (reserved.length ? (
          <ConfirmButton
            size="xs"
            label="Cordon"
            title={`Cordon ${node.name}?`}
            message={`The node takes no new work until it is returned to service.${breaks}`}
            confirmLabel="Cordon"
            onConfirm={() => run("cordon")}
          />
        ) : (
          <Button size="xs" variant="default" onClick={() => run("cordon")} loading={act.isPending}>
            Cordon
          </Button>
        ))}
      {(node.state === "ready" || node.state === "cordoned") && (
        <ConfirmButton
          size="xs"
          label="Drain"
          title={`Drain ${node.name}?`}
          message={
            (held > 0
              ? `${held} GPUs are in use. Their work is stopped and requeued (development instances fail) and the node takes no new work.`
              : "The node takes no new work until it is returned to service.") + breaks
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

/** How the node walls tenants off: a `process` node is fit for one trusted tenant only. */
export function IsolationBadge({ node }: { node: Schemas["Node"] }) {
  if (node.driver === "simulated") return null;
  return (
    <Badge size="sm" variant="light" color={node.isolated ? "teal" : "orange"}>
      {node.isolated ? `${node.runtime ?? "sandbox"} · isolated` : "not isolated"}
    </Badge>
  );
}

/** Rotate an agent's credential (at its next heartbeat) or revoke it at once. */
export function CredentialActions({ node }: { node: Schemas["Node"] }) {
  const rotate = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/admin/nodes/{node_id}/credential/rotate", { params: { path: { node_id: node.id } } })),
    onSuccess: () => notifySuccess(`${node.name} gets a new credential at its next heartbeat.`),
    onError: (error) => notifyError(error),
  });
  const revoke = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/admin/nodes/{node_id}/credential/revoke", { params: { path: { node_id: node.id } } })),
    onSuccess: () => notifySuccess(`${node.name}'s credential is revoked.`),
    onError: (error) => notifyError(error),
  });
  if (node.driver !== "agent") return null;
  return (
    <Group gap="xs" wrap="nowrap">
      <Button size="xs" variant="default" onClick={() => rotate.mutate()} loading={rotate.isPending}>
        Rotate credential
      </Button>
      <ConfirmButton
        size="xs"
        label="Revoke credential"
        title={`Revoke ${node.name}'s credential?`}
        message="Its agent is refused from its next call; the node registers again only with a join token issued for it. Its workloads keep running until it is back or declared lost."
        confirmLabel="Revoke"
        onConfirm={() => revoke.mutate()}
      />
    </Group>
  );
}

import { Badge, Button, Group, Stack, Text, TextInput } from "@mantine/core";
import { useMutation } from "@tanstack/react-query";
import { useState } from "react";
import { useNodeAction } from "../../api/admin";
import { api, type Schemas, unwrap } from "../../api/client";
import { ConfirmButton } from "../../components/ConfirmButton";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useOrgNames } from "../../api/queries";
import { shortId, words } from "../../lib/format";
import { t } from "../../i18n";

/** Who holds GPUs on the node: each tenant with the orders it would lose there. */
export function holdersOf(node: Schemas["Node"], names: Map<string, string> | undefined): string {
  const byTenant = new Map<string, Set<string>>();
  for (const gpu of node.gpus) {
    const held = [
      ...(gpu.order_id ? [{ org: gpu.org_id ?? "", order: gpu.order_id }] : []),
      ...gpu.shares.map((s) => ({ org: s.org_id ?? "", order: s.order_id })),
    ];
    for (const { org, order } of held) byTenant.set(org, (byTenant.get(org) ?? new Set()).add(shortId(order)));
  }
  return [...byTenant]
    .map(([org, orders]) => t("nodeActions.holder", { tenant: names?.get(org) ?? t("nodeActions.tenant"), orders: [...orders].join(", ") }))
    .join("; ");
}

/** Cordon (no new work), drain (move work off) and return to service. */
export function NodeActions({ node }: { node: Schemas["Node"] }) {
  const act = useNodeAction();
  // Reservations on the node are named in the confirmation, and taking
  // it out of service then breaks them knowingly.
  const reserved = node.reservations.map((r) => r.name);
  const breaks = reserved.length
    ? t("nodeActions.breaks", { names: reserved.join(", ") })
    : "";
  const [reason, setReason] = useState("");
  const run = (action: "cordon" | "drain" | "uncordon") =>
    act.mutate(
      { nodeId: node.id, action, force: reserved.length > 0, reason: action === "uncordon" ? undefined : reason },
      {
        onSuccess: (n) => {
          setReason("");
          notifySuccess(t("nodeActions.done", { node: n.name, state: words(n.state) }));
        },
        onError: (error) => notifyError(error),
      },
    );
  const held = node.gpus.filter((g) => g.order_id || g.shares.length > 0).length;
  const names = useOrgNames().data;
  const holders = holdersOf(node, names);
  return (
    <Group gap="xs" wrap="nowrap">
      {node.state === "ready" && (
        <ConfirmButton
          size="xs"
          tone="blue"
          label={t("nodeActions.cordon")}
          title={t("nodeActions.cordonTitle", { node: node.name })}
          message={<WithReason message={t("nodeActions.noNewWork") + breaks} reason={reason} onReason={setReason} />}
          confirmLabel={t("nodeActions.cordon")}
          loading={act.isPending && act.variables?.action === "cordon"}
          onConfirm={() => run("cordon")}
        />
      )}
      {(node.state === "ready" || node.state === "cordoned") && (
        <ConfirmButton
          size="xs"
          label={t("nodeActions.drain")}
          title={t("nodeActions.drainTitle", { node: node.name })}
          message={
            <WithReason
              message={(held > 0 ? t("nodeActions.drainBusy", { count: held, holders }) : t("nodeActions.noNewWork")) + breaks}
              reason={reason}
              onReason={setReason}
            />
          }
          confirmLabel={t("nodeActions.drain")}
          loading={act.isPending && act.variables?.action === "drain"}
          onConfirm={() => run("drain")}
        />
      )}
      {node.state !== "ready" && node.state !== "unhealthy" && (
        <Button size="xs" variant="light" onClick={() => run("uncordon")} loading={act.isPending}>
          {t("nodeActions.returnToService")}
        </Button>
      )}
    </Group>
  );
}

/** A confirmation's words with a field for why, kept with the node's state. */
function WithReason({ message, reason, onReason }: { message: string; reason: string; onReason: (reason: string) => void }) {
  return (
    <Stack gap="sm">
      <Text size="sm">{message}</Text>
      <TextInput
        label={t("nodeActions.reason")}
        description={t("nodeActions.reasonHint")}
        maxLength={500}
        value={reason}
        onChange={(event) => onReason(event.currentTarget.value)}
      />
    </Stack>
  );
}

/** How the node walls tenants off: a `process` node is fit for one trusted tenant only. */
export function IsolationBadge({ node }: { node: Schemas["Node"] }) {
  if (node.driver === "simulated") return null;
  return (
    <Badge size="sm" color={node.isolated ? "teal.3" : "orange.4"}>
      {node.isolated ? t("nodeActions.isolated", { runtime: words(node.runtime ?? "sandbox") }) : t("nodeActions.notIsolated")}
    </Badge>
  );
}

/** Rotate an agent's credential (at its next heartbeat) or revoke it at once. */
export function CredentialActions({ node }: { node: Schemas["Node"] }) {
  const rotate = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/admin/nodes/{node_id}/credential/rotate", { params: { path: { node_id: node.id } } })),
    onSuccess: () => notifySuccess(t("nodeActions.rotated", { node: node.name })),
    onError: (error) => notifyError(error),
  });
  const revoke = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/admin/nodes/{node_id}/credential/revoke", { params: { path: { node_id: node.id } } })),
    onSuccess: () => notifySuccess(t("nodeActions.revoked", { node: node.name })),
    onError: (error) => notifyError(error),
  });
  if (node.driver !== "agent") return null;
  return (
    <Group gap="xs" wrap="nowrap">
      <Button size="xs" variant="default" onClick={() => rotate.mutate()} loading={rotate.isPending}>
        {t("nodeActions.rotate")}
      </Button>
      <ConfirmButton
        size="xs"
        label={t("nodeActions.revokeLabel")}
        title={t("nodeActions.revokeTitle", { node: node.name })}
        message={t("nodeActions.revokeBody")}
        confirmLabel={t("nodeActions.revoke")}
        onConfirm={() => revoke.mutate()}
      />
    </Group>
  );
}

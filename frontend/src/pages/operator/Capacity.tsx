import { Badge, Group, Paper, SimpleGrid, Stack, Table, Text, Title, Tooltip, VisuallyHidden } from "@mantine/core";
import { Link } from "@tanstack/react-router";
import { useAllNodes } from "../../api/admin";
import type { Schemas } from "../../api/client";
import { useOrgNames } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { StatusBadge } from "../../components/StatusBadge";
import { PageHeader } from "../../components/PageHeader";
import {
  capacityByModel,
  cellOf,
  groupNodes,
  nodeState,
  reservationOn,
  SHAPES,
  shareBackground,
  tenantColour,
  type GpuCell,
} from "../../lib/capacity";
import { dateTime, shortId } from "../../lib/format";
import classes from "./Capacity.module.css";
import { t } from "../../i18n";
import { Trans } from "react-i18next";

export function CapacityPage() {
  const nodes = useAllNodes();
  const orgs = useOrgNames();
  const names = orgs.data ?? new Map<string, string>();
  return (
    <>
      <PageHeader
        title={t("capacity.title")}
        subtitle={t("capacity.subtitle")}
      />
      <Loadable query={nodes}>
        {(list) => (
          <Stack>
            <Shapes nodes={list} />
            <Legend nodes={list} names={names} />
            {groupNodes(list).map((group) => (
              <Paper withBorder p="sm" key={group.key}>
                <Group justify="space-between" mb="xs">
                  <Title order={5}>
                    {t("capacity.rack", { region: group.region, rack: group.rack })}
                  </Title>
                  {group.idle.map((fold) => (
                    <Badge key={fold.instanceType} variant="outline" color="gray">
                      {t("capacity.idle", { count: fold.count, type: fold.instanceType, gpus: fold.count * fold.gpus })}
                    </Badge>
                  ))}
                </Group>
                <div className={classes.rows}>
                  {group.nodes.map((node) => (
                    <NodeRow key={node.id} node={node} names={names} />
                  ))}
                </div>
              </Paper>
            ))}
          </Stack>
        )}
      </Loadable>
    </>
  );
}

function NodeRow({ node, names }: { node: Schemas["Node"]; names: Map<string, string> }) {
  const blocked = node.state !== "ready";
  return (
    <div className={classes.row} data-state={node.state}>
      <Link to="/admin/nodes/$nodeId" params={{ nodeId: node.id }} className={classes.name}>
        {node.name}
      </Link>
      <div className={classes.gpus} role="list" aria-label={t("capacity.gpusOf", { node: node.name })}>
        {node.gpus.map((gpu) => {
          const cell = cellOf(gpu);
          const reserved = reservationOn(node, gpu.index);
          const label =
            describe(cell, names, gpu.index) +
            (reserved
              ? t("capacity.reservedFor", { org: names.get(reserved.org_id) ?? reserved.org_id, name: reserved.name, from: dateTime(reserved.starts_at), to: dateTime(reserved.ends_at) })
              : "");
          return (
            <Tooltip key={gpu.index} label={label} openDelay={150}>
              <div
                role="listitem"
                aria-label={label}
                className={classes.gpu}
                data-kind={cell.kind}
                data-blocked={blocked || undefined}
                data-reserved={reserved ? true : undefined}
                data-mig={(cell.kind === "free" || cell.kind === "shared") && cell.mig ? true : undefined}
                style={style(cell)}
              />
            </Tooltip>
          );
        })}
      </div>
      {blocked && (
        <Tooltip label={node.state_reason} disabled={!node.state_reason}>
          <span>
            <StatusBadge status={nodeState(node)} size="xs" />
            {node.state_reason && <VisuallyHidden>{node.state_reason}</VisuallyHidden>}
          </span>
        </Tooltip>
      )}
    </div>
  );
}

function style(cell: GpuCell) {
  if (cell.kind === "held" && cell.orgId) return { background: tenantColour(cell.orgId) };
  if (cell.kind === "shared") return { backgroundImage: shareBackground(cell.parts) };
  return undefined;
}

function describe(cell: GpuCell, names: Map<string, string>, index: number): string {
  const tenant = (orgId: string | null) => (orgId ? (names.get(orgId) ?? shortId(orgId)) : t("capacity.held"));
  switch (cell.kind) {
    case "free":
      return t(cell.mig ? "capacity.freeMig" : "capacity.free", { index });
    case "unhealthy":
      return t("capacity.unhealthy", { index });
    case "outside":
      return t("capacity.outside", { index });
    case "held":
      return t("capacity.heldBy", { index, tenant: tenant(cell.orgId), order: shortId(cell.orderId) });
    case "shared": {
      const used = cell.parts.reduce((sum, p) => sum + p.share, 0);
      const parts = cell.parts.map((p) => t("capacity.part", { tenant: tenant(p.orgId), share: p.label, order: shortId(p.orderId) }));
      return t(cell.mig ? "capacity.sharedMig" : "capacity.shared", { index, parts: parts.join(", "), free: Math.round((1 - used) * 100) });
    }
  }
}

function Legend({ nodes, names }: { nodes: Schemas["Node"][]; names: Map<string, string> }) {
  // GPUs each tenant holds, a share counted as the part of its GPU it is.
  const tenants = new Map<string, number>();
  for (const node of nodes)
    for (const gpu of node.gpus) {
      const cell = cellOf(gpu);
      const parts = cell.kind === "held" ? [{ orgId: cell.orgId, share: 1 }] : cell.kind === "shared" ? cell.parts : [];
      for (const { orgId, share } of parts) if (orgId) tenants.set(orgId, (tenants.get(orgId) ?? 0) + share);
    }
  return (
    <Group gap="md" aria-label={t("shape.legend")}>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="free" /> <Text size="sm">{t("capacity.legendFree")}</Text>
      </Group>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="unhealthy" /> <Text size="sm">{t("capacity.legendUnhealthy")}</Text>
      </Group>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="outside" /> <Text size="sm">{t("capacity.legendOutside")}</Text>
      </Group>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="free" data-blocked /> <Text size="sm">{t("capacity.legendBlocked")}</Text>
      </Group>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="free" data-reserved /> <Text size="sm">{t("capacity.legendReserved")}</Text>
      </Group>
      <Group gap={4}>
        <div
          className={classes.gpu}
          data-kind="shared"
          style={{ backgroundImage: "linear-gradient(to top, var(--mantine-color-gray-6) 0 50%, transparent 50%)" }}
        />{" "}
        <Text size="sm">{t("capacity.legendShared")}</Text>
      </Group>
      <Group gap={4}>
        <div className={classes.gpu} data-kind="free" data-mig /> <Text size="sm">{t("capacity.legendMig")}</Text>
      </Group>
      {[...tenants.entries()].map(([org, count]) => (
        <Group gap={4} key={org}>
          <div className={classes.gpu} style={{ background: tenantColour(org) }} />
          <Text size="sm">
            {names.get(org) ?? shortId(org)} ({t("overview.gpus", { count: Math.round(count * 100) / 100 })})
          </Text>
        </Group>
      ))}
    </Group>
  );
}

/** Free is not the same as usable: what each GPU model can still start. */
function Shapes({ nodes }: { nodes: Schemas["Node"][] }) {
  const models = capacityByModel(nodes);
  return (
    <SimpleGrid cols={{ base: 1, md: 2, xl: 3 }}>
      {models.map((m) => (
        <Paper withBorder p="sm" key={m.model}>
          <Group justify="space-between">
            <Text fw={600}>{m.model}</Text>
            <Text size="sm" c="dimmed">
              {t("capacity.total", { count: m.total })}
            </Text>
          </Group>
          <Text size="sm">
            <Trans i18nKey="capacity.summary" values={{ free: m.free, schedulable: m.schedulable, largest: m.largest }} components={{ b: <b /> }} />
          </Text>
          <Table mt="xs" aria-label={t("capacity.placeable", { model: m.model })}>
            <Table.Thead>
              <Table.Tr>
                {SHAPES.map((s) => (
                  <Table.Th key={s} ta="center">
                    {t("capacity.shape", { count: s })}
                  </Table.Th>
                ))}
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              <Table.Tr>
                {SHAPES.map((s) => (
                  <Table.Td key={s} ta="center" c={m.placeable[s] ? undefined : "dimmed"}>
                    {m.placeable[s] ?? 0} ×
                  </Table.Td>
                ))}
              </Table.Tr>
            </Table.Tbody>
          </Table>
        </Paper>
      ))}
    </SimpleGrid>
  );
}

import { Badge, Group, Paper, Stack, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useParams } from "@tanstack/react-router";
import { useMemo } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useOrgNames } from "../../api/queries";
import { Chart } from "../../components/Chart";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { fraction, nodeState } from "../../lib/capacity";
import { dateTime, shortId, words } from "../../lib/format";
import { CredentialActions, IsolationBadge, NodeActions } from "./NodeActions";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";

export function NodeDetailPage() {
  const { nodeId } = useParams({ strict: false }) as { nodeId: string };
  const node = useQuery({
    queryKey: keys.admin("node", nodeId),
    queryFn: () => unwrap(api.GET("/api/v1/admin/nodes/{node_id}", { params: { path: { node_id: nodeId } } })),
    refetchInterval: 5_000,
  });
  const telemetry = useQuery({
    queryKey: keys.admin("telemetry", nodeId),
    queryFn: () =>
      unwrap(api.GET("/api/v1/admin/nodes/{node_id}/telemetry", { params: { path: { node_id: nodeId }, query: { minutes: 15 } } })),
    refetchInterval: 10_000,
  });
  const names = useOrgNames().data ?? new Map<string, string>();
  return (
    <Loadable query={node}>
      {(n) => (
        <>
          <PageHeader
            title={n.name}
            subtitle={
              <AnchorLink to="/admin/nodes" size="sm">
                {t("node.all")}
              </AnchorLink>
            }
            actions={<NodeActions node={n} />}
          />
          <Stack>
            <Paper withBorder p="md">
              <Group gap="lg">
                <StatusBadge status={nodeState(n)} />
                {n.state !== "ready" && n.state_reason && <Text size="sm">{t("node.because", { reason: n.state_reason })}</Text>}
                <Text size="sm">
                  {t("node.where", { region: n.region, rack: n.rack || "—", type: n.instance_type ?? t("node.custom"), driver: words(n.driver) })}
                </Text>
                <Text size="sm">
                  {t("node.resources", { vcpus: n.cpu_milli / 1000, memory: Math.round(n.memory_mib / 1024) })}
                </Text>
                <Text size="sm" c="dimmed">
                  {t("node.heartbeat", { at: dateTime(n.last_heartbeat_at) })}
                </Text>
                <IsolationBadge node={n} />
                <CredentialActions node={n} />
              </Group>
              {n.labels.length > 0 && (
                <Group gap={4} mt="xs">
                  {n.labels.map((l) => (
                    <Badge key={l} variant="outline" size="sm">
                      {l}
                    </Badge>
                  ))}
                </Group>
              )}
            </Paper>
            <Paper withBorder p="md">
              <Title order={4} mb="sm">
                {t("node.gpus")}
              </Title>
              <Table.ScrollContainer minWidth={700}>
                <Table aria-label={t("node.gpus")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("node.index")}</Table.Th>
                      <Table.Th>{t("node.model")}</Table.Th>
                      <Table.Th>{t("node.nvlink")}</Table.Th>
                      <Table.Th>{t("node.health")}</Table.Th>
                      <Table.Th>{t("node.heldBy")}</Table.Th>
                      <Table.Th>UUID</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {n.gpus.map((g) => (
                      <Table.Tr key={g.index}>
                        <Table.Td>{g.index}</Table.Td>
                        <Table.Td>
                          {g.model}
                          {g.mig_enabled && t("node.mig", { count: g.mig_devices.length, profile: g.mig_devices[0]?.profile ?? t("node.noInstances") })}
                        </Table.Td>
                        <Table.Td>{g.nvlink_domain}</Table.Td>
                        <Table.Td>{g.healthy ? t("node.healthy") : <Text c="red">{t("node.unhealthy")}</Text>}</Table.Td>
                        <Table.Td>
                          {g.held_outside ? (
                            t("node.outside")
                          ) : g.order_id ? (
                            <OrderHolder orgId={g.org_id} orderId={g.order_id} label={names.get(g.org_id ?? "") ?? t("node.tenant")} />
                          ) : g.shares.length > 0 ? (
                            g.shares.map((s) => (
                              <div key={s.order_id}>
                                <OrderHolder
                                  orgId={s.org_id}
                                  orderId={s.order_id}
                                  label={`${names.get(s.org_id ?? "") ?? t("node.tenant")} ${g.mig_enabled ? t("node.migInstance") : fraction(s.units)}`}
                                />
                              </div>
                            ))
                          ) : (
                            t("node.free")
                          )}
                        </Table.Td>
                        <Table.Td ff="monospace" fz="xs">
                          {g.hardware_uuid}
                        </Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Paper>
            {n.reservations.length > 0 && (
              <Paper withBorder p="md">
                <Title order={4} mb="sm">
                  {t("node.reservations")}
                </Title>
                <Table aria-label={t("node.reservationsAria")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("node.organization")}</Table.Th>
                      <Table.Th>{t("node.name")}</Table.Th>
                      <Table.Th>{t("node.window")}</Table.Th>
                      <Table.Th>{t("node.gpus")}</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {n.reservations.map((r) => (
                      <Table.Tr key={r.id}>
                        <Table.Td>{names.get(r.org_id) ?? r.org_id}</Table.Td>
                        <Table.Td>{r.name}</Table.Td>
                        <Table.Td>
                          {dateTime(r.starts_at)} – {dateTime(r.ends_at)}
                        </Table.Td>
                        <Table.Td>{r.gpu_ids.join(", ")}</Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Paper>
            )}
            <Paper withBorder p="md">
              <Title order={4} mb="sm">
                {t("node.telemetry")}
              </Title>
              <Loadable query={telemetry}>
                {(readings) =>
                  readings.length === 0 ? (
                    <Text c="dimmed" size="sm">
                      {n.driver === "simulated" ? t("node.noReadingsSimulated") : t("node.noReadingsAgent")}
                    </Text>
                  ) : (
                    <Telemetry readings={readings} />
                  )
                }
              </Loadable>
            </Paper>
          </Stack>
        </>
      )}
    </Loadable>
  );
}

function Telemetry({ readings }: { readings: Schemas["GpuReading"][] }) {
  const option = useMemo(() => {
    const byGpu = new Map<number, [string, number][]>();
    for (const r of readings) byGpu.set(r.gpu_index, [...(byGpu.get(r.gpu_index) ?? []), [r.sampled_at, r.utilization_pct]]);
    return {
      tooltip: { trigger: "axis" },
      legend: {},
      grid: { left: 40, right: 16, top: 40, bottom: 32 },
      xAxis: { type: "time" },
      yAxis: { type: "value", min: 0, max: 100, name: "util %" },
      series: [...byGpu.entries()].map(([index, data]) => ({ name: t("node.gpu", { index }), type: "line", showSymbol: false, data })),
    };
  }, [readings]);
  return <Chart label={t("node.utilizationChart")} option={option} />;
}

/** Who holds a GPU, linked to the order (read-only for an operator outside the organization). */
function OrderHolder({ orgId, orderId, label }: { orgId: string | null | undefined; orderId: string; label: string }) {
  return (
    <>
      {label} ·{" "}
      {orgId ? (
        <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId }} size="sm" ff="monospace">
          {t("node.order", { id: shortId(orderId) })}
        </AnchorLink>
      ) : (
        t("node.order", { id: shortId(orderId) })
      )}
    </>
  );
}

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
import { fraction } from "../../lib/capacity";
import { dateTime, shortId } from "../../lib/format";
import { CredentialActions, IsolationBadge, NodeActions } from "./NodeActions";
import { AnchorLink } from "../../components/links";

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
                ← All nodes
              </AnchorLink>
            }
            actions={<NodeActions node={n} />}
          />
          <Stack>
            <Paper withBorder p="md">
              <Group gap="lg">
                <StatusBadge status={n.state} />
                <Text size="sm">
                  {n.region} · rack {n.rack || "—"} · {n.instance_type ?? "custom"} · {n.driver}
                </Text>
                <Text size="sm">
                  {n.cpu_milli / 1000} vCPU · {Math.round(n.memory_mib / 1024)} GiB
                </Text>
                <Text size="sm" c="dimmed">
                  last heartbeat {dateTime(n.last_heartbeat_at)}
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
                GPUs
              </Title>
              <Table.ScrollContainer minWidth={700}>
                <Table aria-label="GPUs">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Index</Table.Th>
                      <Table.Th>Model</Table.Th>
                      <Table.Th>NVLink domain</Table.Th>
                      <Table.Th>Health</Table.Th>
                      <Table.Th>Held by</Table.Th>
                      <Table.Th>UUID</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {n.gpus.map((g) => (
                      <Table.Tr key={g.index}>
                        <Table.Td>{g.index}</Table.Td>
                        <Table.Td>
                          {g.model}
                          {g.mig_enabled && ` · MIG ${g.mig_devices.length} × ${g.mig_devices[0]?.profile ?? "no instances"}`}
                        </Table.Td>
                        <Table.Td>{g.nvlink_domain}</Table.Td>
                        <Table.Td>{g.healthy ? "healthy" : <Text c="red">unhealthy</Text>}</Table.Td>
                        <Table.Td>
                          {g.order_id ? (
                            <OrderHolder orgId={g.org_id} orderId={g.order_id} label={names.get(g.org_id ?? "") ?? "tenant"} />
                          ) : g.shares.length > 0 ? (
                            g.shares.map((s) => (
                              <div key={s.order_id}>
                                <OrderHolder
                                  orgId={s.org_id}
                                  orderId={s.order_id}
                                  label={`${names.get(s.org_id ?? "") ?? "tenant"} ${g.mig_enabled ? "MIG instance" : fraction(s.units)}`}
                                />
                              </div>
                            ))
                          ) : (
                            "free"
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
                  Reservations
                </Title>
                <Table aria-label="Reservations on this node">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Organization</Table.Th>
                      <Table.Th>Name</Table.Th>
                      <Table.Th>Window</Table.Th>
                      <Table.Th>GPUs</Table.Th>
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
                Telemetry, last 15 minutes
              </Title>
              <Loadable query={telemetry}>
                {(readings) =>
                  readings.length === 0 ? (
                    <Text c="dimmed" size="sm">
                      No readings: {n.driver === "simulated" ? "simulated nodes report none" : "the agent sent none recently"}.
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
      series: [...byGpu.entries()].map(([index, data]) => ({ name: `GPU ${index}`, type: "line", showSymbol: false, data })),
    };
  }, [readings]);
  return <Chart label="GPU utilization over time" option={option} />;
}

/** Who holds a GPU, linked to the order (read-only for an operator outside the organization). */
function OrderHolder({ orgId, orderId, label }: { orgId: string | null | undefined; orderId: string; label: string }) {
  return (
    <>
      {label} ·{" "}
      {orgId ? (
        <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId }} size="sm" ff="monospace">
          order {shortId(orderId)}
        </AnchorLink>
      ) : (
        `order ${shortId(orderId)}`
      )}
    </>
  );
}

import { Alert, Badge, Button, Code, CopyButton, Grid, Group, Paper, SimpleGrid, Stack, Table, Text, Timeline, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useParams } from "@tanstack/react-router";
import { api, type Schemas, unwrap, unwrapJson } from "../../api/client";
import { gpusOf, METERING_SETTLE_MS, regionOf, runtimeSeconds, useCancelOrder, useOrder, type Order } from "../../api/orders";
import { keys } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge, TERMINAL } from "../../components/StatusBadge";
import { dateTime, duration, gpuHours, money, shortId, words } from "../../lib/format";
import { useNow } from "../../lib/now";
import { useOperatorView } from "../../lib/orgId";
import { WaitReasons } from "../../components/WaitReasons";
import { notifyError, notifySuccess } from "../../lib/notify";
import { Attempts, JobSummary, Output } from "./JobPanels";
import { AnchorLink } from "../../components/links";

export function OrderDetailPage() {
  const { orgId, orderId } = useParams({ strict: false }) as { orgId: string; orderId: string };
  const order = useOrder(orgId, orderId);
  return <Loadable query={order}>{(data) => <OrderView orgId={orgId} order={data} />}</Loadable>;
}

function OrderView({ orgId, order }: { orgId: string; order: Order }) {
  const cancel = useCancelOrder(orgId);
  const viewing = useOperatorView(orgId);
  const done = TERMINAL.has(order.status);
  // Runtime ticks while it runs; the order itself is fetched less often.
  const now = useNow(1_000, Boolean(order.started_at) && !order.ended_at);
  const runtime = runtimeSeconds(order, now);
  return (
    <>
      <PageHeader
        title={order.name}
        subtitle={
          <Group gap="xs">
            <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} size="sm">
              ← All orders
            </AnchorLink>
            <Text size="sm" c="dimmed">
              {order.kind === "job" ? "Job" : "Instance"} ·{" "}
              <Text span ff="monospace" size="sm" title={order.id}>
                {shortId(order.id)}
              </Text>
            </Text>
            <CopyValue value={order.id} label="Copy id" />
          </Group>
        }
        actions={
          !done &&
          !viewing && (
            <ConfirmButton
              label="Cancel order"
              title="Cancel this order?"
              message={
                order.status === "running"
                  ? `The instance on ${order.placement.map((p) => p.node_name).join(", ")} is stopped and its GPUs are released. Anything not saved off the machine is lost.`
                  : "The order leaves the queue and will not start."
              }
              confirmLabel="Cancel order"
              loading={cancel.isPending}
              onConfirm={() =>
                cancel.mutate(order.id, {
                  onSuccess: () => notifySuccess("The order is being cancelled."),
                  onError: (error) => notifyError(error),
                })
              }
            />
          )
        }
      />
      <Grid>
        <Grid.Col span={{ base: 12, md: 7 }}>
          <Stack>
            <Paper withBorder p="md">
              <Group justify="space-between" mb="sm">
                <Title order={4}>Status</Title>
                <StatusBadge status={order.status} />
              </Group>
              {order.status === "queued" && (order.pending_details.length > 0 || order.pending_reason) && (
                <Alert color="yellow" title="Why it waits" mb="sm">
                  <WaitReasons orgId={orgId} order={order} />
                  {order.estimated_start && <Text size="sm" mt={4}>Estimated start: {dateTime(order.estimated_start)}</Text>}
                </Alert>
              )}
              {order.failure_reason && (
                <Alert color="red" title="Why it ended" mb="sm">
                  {order.failure_reason}
                </Alert>
              )}
              <Timeline bulletSize={14} lineWidth={2} active={order.ended_at ? 2 : order.started_at ? 1 : 0}>
                <Timeline.Item title="Ordered">
                  <Text size="sm" c="dimmed">{dateTime(order.created_at)}</Text>
                </Timeline.Item>
                <Timeline.Item title="Started">
                  <Text size="sm" c="dimmed">{order.started_at ? dateTime(order.started_at) : "not yet"}</Text>
                </Timeline.Item>
                <Timeline.Item title="Ended">
                  <Text size="sm" c="dimmed" data-testid="ended-at">
                    {order.ended_at ? dateTime(order.ended_at) : "—"}
                  </Text>
                </Timeline.Item>
              </Timeline>
            </Paper>
            <Paper withBorder p="md">
              <Title order={4} mb="sm">
                Placement
              </Title>
              {order.placement.length === 0 ? (
                <Text c="dimmed" size="sm">
                  {order.ended_at
                    ? `Its GPUs were released when it ended${order.job ? "; the attempts show where it ran" : ""}.`
                    : order.started_at
                      ? "Its GPUs are being released."
                      : "Not placed yet."}
                </Text>
              ) : (
                <Table aria-label="Placement">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Node</Table.Th>
                      <Table.Th>GPUs (CUDA_VISIBLE_DEVICES)</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {order.placement.map((p) => (
                      <Table.Tr key={p.node_id}>
                        <Table.Td>{p.node_name}</Table.Td>
                        <Table.Td>
                          <Code>{p.mig_device ?? p.gpu_ids.join(",")}</Code>
                          {p.mig_device && ` on GPU ${p.gpu_ids.join(",")}`}
                        </Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              )}
            </Paper>
            {order.job && <Attempts orgId={orgId} order={order} />}
            {order.job && <Output orgId={orgId} order={order} />}
            {order.access && <AccessPanel access={order.access} />}
          </Stack>
        </Grid.Col>
        <Grid.Col span={{ base: 12, md: 5 }}>
          <Stack>
            {order.job && <JobSummary orgId={orgId} order={order} job={order.job} />}
            <Paper withBorder p="md">
              <Title order={4} mb="sm">
                Shape
              </Title>
              <SimpleGrid cols={2} spacing="xs">
                <Fact label="Instance type" value={order.instance_type} />
                <Fact label="GPUs" value={gpusOf(order)} />
                <Fact label="Nodes" value={String(order.node_count)} />
                <Fact label="Region" value={regionOf(order)} />
                <Fact label="Pricing" value={words(order.pricing_class)} />
                <Fact label="Priority" value={words(order.priority_class)} />
                <Fact label="Workload" value={words(order.workload_class)} />
                <Fact label="Runtime" value={runtime === null ? "—" : duration(runtime)} />
                <Fact label="Attempts" value={String(order.attempts)} />
                {order.deadline && <Fact label="Deadline" value={dateTime(order.deadline)} />}
              </SimpleGrid>
            </Paper>
            <OrderUsage orgId={orgId} order={order} />
          </Stack>
        </Grid.Col>
      </Grid>
    </>
  );
}

/** How to reach the order on each node: the exact ssh command with its host key, and exposed ports. */
function AccessPanel({ access }: { access: Schemas["OrderAccess"] }) {
  const isolated = access.runtime !== "process";
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>Access</Title>
        {access.runtime && (
          <Badge color={isolated ? "teal" : "orange"} variant="light">
            {isolated ? `${access.runtime} · isolated` : "not isolated"}
          </Badge>
        )}
      </Group>
      <Table aria-label="Access">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Node</Table.Th>
            <Table.Th>SSH</Table.Th>
            <Table.Th>Ports</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {access.hosts.map((host) => (
            <Table.Tr key={host.node}>
              <Table.Td>{host.node}</Table.Td>
              <Table.Td>
                {host.ssh ? (
                  <Stack gap={2}>
                    <Group gap="xs" wrap="nowrap">
                      <Code>{host.ssh.command}</Code>
                      <CopyValue value={host.ssh.command} />
                    </Group>
                    {host.ssh.host_key_fingerprint && (
                      <Text size="xs" c="dimmed">
                        Host key {host.ssh.host_key_fingerprint}
                      </Text>
                    )}
                  </Stack>
                ) : (
                  <Text size="sm" c="dimmed">
                    none
                  </Text>
                )}
              </Table.Td>
              <Table.Td>
                <Stack gap={2}>
                  {(host.ports ?? []).map((p) => (
                    <Group key={p.port} gap="xs" wrap="nowrap">
                      <Code>{`${p.port} → ${host.host}:${p.node_port}`}</Code>
                      <CopyValue value={`${host.host}:${p.node_port}`} />
                    </Group>
                  ))}
                </Stack>
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </Paper>
  );
}

function CopyValue({ value, label = "Copy" }: { value: string; label?: string }) {
  return (
    <CopyButton value={value}>
      {({ copied, copy }) => (
        <Button size="compact-xs" variant="subtle" onClick={copy}>
          {copied ? "Copied" : label}
        </Button>
      )}
    </CopyButton>
  );
}

function Fact({ label, value }: { label: string; value: string }) {
  return (
    <div>
      <Text size="xs" c="dimmed">
        {label}
      </Text>
      <Text size="sm">{value}</Text>
    </div>
  );
}

/** Metered GPU time and cost so far, beside the GPUs' measured utilization. */
function OrderUsage({ orgId, order }: { orgId: string; order: Order }) {
  // Metering catches up a little after the order ends.
  const now = useNow(5_000);
  const growing = !order.ended_at || now - Date.parse(order.ended_at) < METERING_SETTLE_MS;
  const spend = useQuery({
    queryKey: keys.org(orgId, "order-spend", order.id),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/spend", {
          params: { path: { org_id: orgId }, query: { order_id: order.id, from: order.created_at } },
        }),
      ),
    enabled: Boolean(order.started_at),
    refetchInterval: growing ? 5_000 : false,
    retry: false,
  });
  const usage = useQuery({
    queryKey: keys.org(orgId, "order-usage", order.id),
    queryFn: () =>
      unwrapJson(
        api.GET("/api/v1/orgs/{org_id}/usage", {
          params: {
            path: { org_id: orgId },
            query: { group_by: "order", from: order.created_at, to: new Date(Date.now() + 60_000).toISOString() },
          },
        }),
      ),
    enabled: Boolean(order.started_at),
    refetchInterval: growing ? 5_000 : false,
  });
  const group = usage.data?.groups.find((g) => g.key === order.id);
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        Usage
      </Title>
      {!order.started_at ? (
        <Text c="dimmed" size="sm">
          Usage starts when the order runs.
        </Text>
      ) : usage.isError ? (
        <ProblemAlert error={usage.error} title="Usage is not available" />
      ) : (
        <SimpleGrid cols={2} spacing="xs" aria-label="Order usage">
          <div>
            <Text size="xs" c="dimmed">
              GPU-hours metered
            </Text>
            <Text size="xl" fw={600} data-testid="order-gpu-hours">
              {gpuHours(group?.billable_gpu_seconds ?? 0)}
            </Text>
            <Text size="xs" c="dimmed">
              {group?.billable_gpu_seconds ?? 0} GPU-seconds
            </Text>
          </div>
          <div>
            <Text size="xs" c="dimmed">
              Cost so far
            </Text>
            <Text size="xl" fw={600} data-testid="order-cost">
              {spend.data ? money(spend.data.total_micros, spend.data.currency) : "—"}
            </Text>
            <Text size="xs" c="dimmed">
              {spend.isError ? "visible to billing roles" : "as the invoice rates it"}
            </Text>
          </div>
          <div>
            <Text size="xs" c="dimmed">
              Mean GPU utilization
            </Text>
            {group?.mean_gpu_utilization_percent === null || group?.mean_gpu_utilization_percent === undefined ? (
              <Badge variant="outline" color="gray">
                not reported
              </Badge>
            ) : (
              <Text size="xl" fw={600}>
                {Math.round(group.mean_gpu_utilization_percent)} %
              </Text>
            )}
          </div>
        </SimpleGrid>
      )}
    </Paper>
  );
}

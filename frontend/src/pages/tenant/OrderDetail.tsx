import { Alert, Badge, Button, Code, CopyButton, Grid, Group, Paper, SimpleGrid, Stack, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useParams } from "@tanstack/react-router";
import { api, type Schemas, unwrap, unwrapJson } from "../../api/client";
import { gpusOf, METERING_SETTLE_MS, regionOf, runtimeSeconds, useCancelOrder, useOrder, type Order } from "../../api/orders";
import { keys, useOrgNames, useSshKeys } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge, TERMINAL } from "../../components/StatusBadge";
import { dateTime, duration, gpuHours, money, shortId, words } from "../../lib/format";
import { useNow } from "../../lib/now";
import { useAbilities, useOperatorView } from "../../lib/orgId";
import { WaitReasons } from "../../components/WaitReasons";
import { notifyError, notifySuccess } from "../../lib/notify";
import { Attempts, JobSummary, Output } from "./JobPanels";
import { OrderTimeline } from "./OrderTimeline";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";

export function OrderDetailPage() {
  const { orgId, orderId } = useParams({ strict: false }) as { orgId: string; orderId: string };
  const order = useOrder(orgId, orderId);
  return <Loadable query={order}>{(data) => <OrderView orgId={orgId} order={data} />}</Loadable>;
}

function OrderView({ orgId, order }: { orgId: string; order: Order }) {
  const cancel = useCancelOrder(orgId);
  const viewing = useOperatorView(orgId);
  const can = useAbilities(orgId);
  const organization = useOrgNames(viewing).data?.get(orgId);
  const done = TERMINAL.has(order.status);
  // Runtime ticks while it runs; the order itself is fetched less often.
  const now = useNow(1_000, Boolean(order.running_since));
  const runtime = runtimeSeconds(order, now);
  const sshKeys = useSshKeys();
  // Keys are their owners': a teammate's key is named as such.
  const keyNames = order.ssh_key_ids.map((id) => sshKeys.data?.find((k) => k.id === id)?.name ?? t("order.teammateKey"));
  return (
    <>
      <PageHeader
        title={order.name}
        subtitle={
          <Group gap="xs">
            <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} size="sm">
              {t("order.allOrders")}
            </AnchorLink>
            <Text size="sm" c="dimmed">
              {order.kind === "job" ? t("order.job") : t("order.instance")} ·{" "}
              <Text span ff="monospace" size="sm" title={order.id}>
                {shortId(order.id)}
              </Text>
            </Text>
            <CopyValue value={order.id} label={t("common.copyId")} />
          </Group>
        }
        actions={
          !done &&
          can.order && (
            <ConfirmButton
              label={t("order.cancel")}
              title={t("order.cancelTitle")}
              message={
                order.status === "running"
                  ? t("order.cancelRunning", { nodes: order.placement.map((p) => p.node_name).join(", ") })
                  : t("order.cancelQueued")
              }
              confirmLabel={t("order.cancel")}
              loading={cancel.isPending}
              onConfirm={() =>
                cancel.mutate(order.id, {
                  onSuccess: () => notifySuccess(t("order.cancelling")),
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
                <Title order={4}>{t("order.status")}</Title>
                <StatusBadge status={order.status} />
              </Group>
              {order.status === "queued" && (order.pending_details.length > 0 || order.pending_reason) && (
                <Alert color="yellow" title={t("order.whyWaits")} mb="sm">
                  <WaitReasons orgId={orgId} order={order} reader={viewing ? { organization: organization ?? "" } : {}} />
                  {order.estimated_start && <Text size="sm" mt={4}>{t("order.estimatedStart", { at: dateTime(order.estimated_start) })}</Text>}
                  {order.estimate_confidence && (
                    <Text size="xs" c="dimmed" data-testid="estimate-confidence">
                      {t(order.estimate_confidence === "reserved" ? "order.estimateReserved" : "order.estimatePlanned")}
                    </Text>
                  )}
                </Alert>
              )}
              {order.failure_reason && (
                <Alert color="red" title={t("order.whyEnded")} mb="sm">
                  {order.failure_reason}
                </Alert>
              )}
              <OrderTimeline orgId={orgId} order={order} />
            </Paper>
            <Paper withBorder p="md">
              <Title order={4} mb="sm">
                {t("order.placement")}
              </Title>
              {order.placement.length === 0 ? (
                <Text c="dimmed" size="sm">
                  {order.ended_at
                    ? t(order.job ? "order.releasedJob" : "order.released")
                    : TERMINAL.has(order.status) || order.status === "preempted"
                      ? t("order.releasing")
                      : t(order.attempts > 0 ? "order.placedAgain" : "order.notPlaced")}
                </Text>
              ) : (
                <Table aria-label={t("order.placement")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("order.node")}</Table.Th>
                      <Table.Th>{t("order.gpusVisible")}</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {order.placement.map((p) => (
                      <Table.Tr key={p.node_id}>
                        <Table.Td>{p.node_name}</Table.Td>
                        <Table.Td>
                          <Code>{p.mig_device ?? p.gpu_ids.join(",")}</Code>
                          {p.mig_device && t("order.onGpu", { gpus: p.gpu_ids.join(",") })}
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
                {t("order.shape")}
              </Title>
              <SimpleGrid cols={2} spacing="xs">
                <Fact label={t("order.instanceType")} value={order.instance_type} />
                <Fact label={t("order.image")} value={order.image ?? t("order.defaultImage")} />
                <Fact label={t("order.gpus")} value={gpusOf(order)} />
                <Fact label={t("order.nodes")} value={String(order.node_count)} />
                <Fact label={t("order.region")} value={regionOf(order)} />
                <Fact label={t("order.pricing")} value={words(order.pricing_class)} />
                <Fact label={t("order.priority")} value={words(order.priority_class)} />
                <Fact label={t("order.workload")} value={words(order.workload_class)} />
                <Fact label={t("order.runtime")} value={runtime === null ? "—" : duration(runtime)} />
                <Fact label={t("order.attempts")} value={String(order.attempts)} />
                {order.kind === "instance" && (
                  <>
                    <Fact label={t("order.portsAsked")} value={order.ports.length ? order.ports.join(", ") : t("order.noPorts")} />
                    <Fact label={t("order.sshKeys")} value={keyNames.length ? keyNames.join(", ") : t("order.noKeys")} />
                  </>
                )}
                {order.deadline && <Fact label={t("order.deadline")} value={dateTime(order.deadline)} />}
              </SimpleGrid>
            </Paper>
            <OrderUsage orgId={orgId} order={order} billing={can.billing} />
          </Stack>
        </Grid.Col>
      </Grid>
    </>
  );
}

/** How to reach the order on each node: the exact ssh command with its host key, and exposed ports; on a Slurm region, the job that holds it. */
export function AccessPanel({ access }: { access: Schemas["OrderAccess"] }) {
  const isolated = access.runtime !== "process";
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>{t("order.access")}</Title>
        {access.runtime && (
          <Badge color={isolated ? "teal.3" : "orange.4"}>
            {isolated ? t("order.isolated", { runtime: words(access.runtime) }) : t("order.notIsolated")}
          </Badge>
        )}
      </Group>
      {access.slurm && (
        <Stack gap={2} mb="sm">
          <Text size="sm">{t("order.slurmJob", { id: access.slurm.job_id })}</Text>
          <CommandLine command={access.slurm.command} />
        </Stack>
      )}
      <Table.ScrollContainer minWidth={520}>
        <Table aria-label={t("order.access")}>
          <Table.Thead>
            <Table.Tr>
              <Table.Th>{t("order.node")}</Table.Th>
              <Table.Th>{t("order.ssh")}</Table.Th>
              <Table.Th>{t("order.ports")}</Table.Th>
            </Table.Tr>
          </Table.Thead>
          <Table.Tbody>
            {access.hosts.map((host) => (
              <Table.Tr key={host.node}>
                <Table.Td>
                  <Stack gap={2}>
                    <Text size="sm">{host.node}</Text>
                    {host.private_address && (
                      <Text size="xs" c="dimmed">
                        {t("order.privateAddress", { address: host.private_address })}
                      </Text>
                    )}
                  </Stack>
                </Table.Td>
                <Table.Td>
                  {host.ssh ? (
                    <Stack gap={2}>
                      <CommandLine command={host.ssh.command} />
                      {host.ssh.host_key_fingerprint && (
                        <Text size="xs" c="dimmed">
                          {t("order.hostKey", { fingerprint: host.ssh.host_key_fingerprint })}
                        </Text>
                      )}
                    </Stack>
                  ) : (
                    <Text size="sm" c="dimmed">
                      {t("common.none")}
                    </Text>
                  )}
                </Table.Td>
                <Table.Td>
                  <Stack gap={2}>
                    {(host.ports ?? []).length === 0 && (
                      <Text size="sm" c="dimmed">
                        {t("order.noPortsExposed")}
                      </Text>
                    )}
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
      </Table.ScrollContainer>
    </Paper>
  );
}

/** A command to paste into a shell, on one scrollable line, with a copy button. */
function CommandLine({ command }: { command: string }) {
  return (
    <Group gap="xs" wrap="nowrap">
      <Code style={{ whiteSpace: "nowrap", overflowX: "auto", maxWidth: "100%" }} tabIndex={0}>
        {command}
      </Code>
      <CopyValue value={command} />
    </Group>
  );
}

function CopyValue({ value, label = t("common.copy") }: { value: string; label?: string }) {
  return (
    <CopyButton value={value}>
      {({ copied, copy }) => (
        <Button size="compact-xs" variant="subtle" onClick={copy}>
          {copied ? t("common.copied") : label}
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
function OrderUsage({ orgId, order, billing }: { orgId: string; order: Order; billing: boolean }) {
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
    enabled: billing && Boolean(order.started_at),
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
    enabled: billing && Boolean(order.started_at),
    refetchInterval: growing ? 5_000 : false,
  });
  const group = usage.data?.groups.find((g) => g.key === order.id);
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("order.usage")}
      </Title>
      {!billing ? (
        <Text c="dimmed" size="sm">
          {t("order.usageForBilling")}
        </Text>
      ) : !order.started_at ? (
        <Text c="dimmed" size="sm">
          {t("order.usageLater")}
        </Text>
      ) : usage.isError ? (
        <ProblemAlert error={usage.error} title={t("order.usageUnavailable")} />
      ) : (
        <SimpleGrid cols={2} spacing="xs" aria-label={t("order.usageAria")}>
          <div>
            <Text size="xs" c="dimmed">
              {t("order.gpuHours")}
            </Text>
            <Text size="xl" fw={600} data-testid="order-gpu-hours">
              {gpuHours(group?.billable_gpu_seconds ?? 0)}
            </Text>
            <Text size="xs" c="dimmed">
              {t("order.gpuSeconds", { count: group?.billable_gpu_seconds ?? 0 })}
            </Text>
          </div>
          <div>
            <Text size="xs" c="dimmed">
              {t("order.costSoFar")}
            </Text>
            <Text size="xl" fw={600} data-testid="order-cost">
              {spend.data ? money(spend.data.total_micros, spend.data.currency) : "—"}
            </Text>
            <Text size="xs" c="dimmed">
              {spend.isError ? t("common.visibleToBilling") : t("order.asInvoiced")}
            </Text>
          </div>
          <div>
            <Text size="xs" c="dimmed">
              {t("order.utilization")}
            </Text>
            {group?.mean_gpu_utilization_percent === null || group?.mean_gpu_utilization_percent === undefined ? (
              <Badge variant="outline" color="gray">
                {t("order.notReported")}
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

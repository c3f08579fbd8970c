import { Alert, Grid, Group, Paper, Progress, Stack, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";

import { api, unwrap } from "../../api/client";
import { gpuCount, useOrders } from "../../api/orders";
import { keys, useQuotas, useSpend } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { WaitReasons } from "../../components/WaitReasons";
import { dateTime, money, number, words } from "../../lib/format";
import { useAbilities, useOrgId } from "../../lib/orgId";
import { AnchorLink, ButtonLink } from "../../components/links";
import { useTranslation } from "react-i18next";

/** Active orders listed on the overview; the orders page has the rest. */
const SHOWN = 10;

export function OverviewPage() {
  const orgId = useOrgId();
  const { t } = useTranslation();
  const can = useAbilities(orgId);
  const orders = useOrders(orgId);
  const quotas = useQuotas(orgId);
  const billing = useQuery({
    queryKey: keys.org(orgId, "billing"),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/billing", { params: { path: { org_id: orgId } } })),
    enabled: can.billing,
    retry: false,
  });
  const spend = useSpend(orgId, undefined, can.billing);
  const waiting = useQuery({
    queryKey: keys.org(orgId, "queue-limits"),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/queue-limits", { params: { path: { org_id: orgId } } })),
  });
  const balance = useQuery({
    queryKey: keys.org(orgId, "balance"),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/balance", { params: { path: { org_id: orgId } } })),
    enabled: can.billing,
    retry: false,
  });
  const items = orders.data?.pages.flatMap((p) => p.items) ?? [];
  const live = items.filter((o) => ["queued", "scheduled", "provisioning", "running"].includes(o.status));
  const running = live.filter((o) => o.status === "running");
  const troubles = items.filter((o) => o.status === "failed" || o.status === "preempted").slice(0, 5);

  return (
    <>
      <PageHeader
        title={t("overview.title")}
        actions={
          can.order && (
            <ButtonLink to="/orgs/$orgId/launch" params={{ orgId }}>
              {t("overview.launch")}
            </ButtonLink>
          )
        }
      />
      <Grid>
        <Grid.Col span={{ base: 12, sm: 6, lg: 3 }}>
          <Stat label={t("overview.running")} value={String(running.length)} detail={t("overview.gpus", { count: running.reduce((n, o) => n + gpuCount(o), 0) })} />
        </Grid.Col>
        <Grid.Col span={{ base: 12, sm: 6, lg: 3 }}>
          <Stat label={t("overview.waiting")} value={String(live.length - running.length)} detail={t("overview.queuedOrStarting")} />
        </Grid.Col>
        <Grid.Col span={{ base: 12, sm: 6, lg: 3 }}>
          <Stat
            testId="spend-month"
            label={t("overview.spend")}
            value={spend.data ? money(spend.data.total_micros, spend.data.currency) : "—"}
            detail={
              !can.billing
                ? t("common.visibleToBilling")
                : billing.data?.terms.monthly_budget_micros
                  ? t("overview.ofBudget", { budget: money(billing.data.terms.monthly_budget_micros) })
                  : t("overview.noBudget")
            }
          />
        </Grid.Col>
        <Grid.Col span={{ base: 12, sm: 6, lg: 3 }}>
          <Stat
            label={t("overview.balance")}
            value={!can.billing ? "—" : balance.data?.prepaid ? money(balance.data.balance_micros) : t("overview.payAsYouGo")}
            detail={
              !can.billing
                ? t("common.visibleToBilling")
                : balance.data?.exhausted_at
                  ? t("overview.exhaustedAt", { at: dateTime(balance.data.exhausted_at) })
                  : t("overview.invoicedMonthly")
            }
          />
        </Grid.Col>
        {balance.data?.prepaid && balance.data.balance_micros <= 0 && (
          <Grid.Col span={12}>
            <Alert color="red" title={t("overview.exhaustedTitle")}>
              {t("overview.exhaustedBody")}
            </Alert>
          </Grid.Col>
        )}
        <Grid.Col span={{ base: 12, lg: 7 }}>
          <Paper withBorder p="md">
            <Group justify="space-between" mb="sm">
              <Title order={4}>{t("overview.activeOrders")}</Title>
              <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} size="sm">
                {t("overview.allOrders")}
              </AnchorLink>
            </Group>
            <Loadable query={orders}>
              {() =>
                live.length === 0 ? (
                  <Text c="dimmed" size="sm">
                    {t("overview.nothingActive")}
                  </Text>
                ) : (
                  <Table aria-label={t("overview.activeOrders")}>
                    <Table.Tbody>
                      {live.slice(0, SHOWN).map((o) => (
                        <Table.Tr key={o.id}>
                          <Table.Td>
                            <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: o.id }} size="sm">
                              {o.name}
                            </AnchorLink>
                          </Table.Td>
                          <Table.Td>{o.instance_type}</Table.Td>
                          <Table.Td>
                            <StatusBadge status={o.status} />
                          </Table.Td>
                          <Table.Td>
                            <Text size="sm" lineClamp={1}>
                              {o.status === "queued" ? <WaitReasons orgId={orgId} order={o} short /> : o.placement.map((p) => p.node_name).join(", ")}
                            </Text>
                          </Table.Td>
                        </Table.Tr>
                      ))}
                    </Table.Tbody>
                    {live.length > SHOWN && (
                      <Table.Caption>
                        <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} size="sm">
                          {t("overview.shownOf", { shown: SHOWN, count: live.length })}
                        </AnchorLink>
                      </Table.Caption>
                    )}
                  </Table>
                )
              }
            </Loadable>
          </Paper>
          {troubles.length > 0 && (
            <Paper withBorder p="md" mt="md">
              <Title order={4} mb="sm">
                {t("overview.alerts")}
              </Title>
              <Stack gap="xs">
                {troubles.map((o) => (
                  <Alert key={o.id} color={o.status === "failed" ? "red" : "orange"} p="xs">
                    <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: o.id }} size="sm">
                      {o.name}
                    </AnchorLink>{" "}
                    {words(o.status)}: {o.failure_reason ?? o.pending_reason ?? t("overview.noReason")}
                  </Alert>
                ))}
              </Stack>
            </Paper>
          )}
        </Grid.Col>
        <Grid.Col span={{ base: 12, lg: 5 }}>
          <Paper withBorder p="md">
            <Title order={4} mb="sm">
              {t("overview.quotaInUse")}
            </Title>
            <Loadable query={quotas}>
              {(list) =>
                list.length === 0 ? (
                  <Text c="dimmed" size="sm">
                    {t("overview.noQuotas")}
                  </Text>
                ) : (
                  <Stack gap="sm">
                    {list.map((q) => (
                      <div key={`${q.gpu_model}-${q.region ?? ""}-${q.project_id ?? ""}`}>
                        <Group justify="space-between">
                          <Text size="sm">
                            {q.gpu_model}
                            {q.region ? ` · ${q.region}` : ""}
                          </Text>
                          <Text size="sm" c="dimmed">
                            {t("overview.quotaUse", { used: q.used_gpus, max: q.max_gpus ?? "∞", guaranteed: q.guaranteed_gpus })}
                          </Text>
                        </Group>
                        <Progress
                          aria-label={t("overview.quotaAria", { model: q.gpu_model })}
                          value={q.max_gpus ? (100 * q.used_gpus) / q.max_gpus : 0}
                          color={q.max_gpus && q.used_gpus >= q.max_gpus ? "red" : "indigo"}
                        />
                      </div>
                    ))}
                  </Stack>
                )
              }
            </Loadable>
            {waiting.data && (
              <Text size="sm" c="dimmed" mt="sm">
                {t("overview.waitingOrders", { waiting: number(waiting.data.waiting_orders), max: number(waiting.data.max_waiting_orders) })}
              </Text>
            )}
          </Paper>
        </Grid.Col>
      </Grid>
    </>
  );
}

function Stat({ label, value, detail, testId }: { label: string; value: string; detail: string; testId?: string }) {
  return (
    <Paper withBorder p="md">
      <Text size="xs" c="dimmed" tt="uppercase" fw={700}>
        {label}
      </Text>
      <Text size="xl" fw={700} data-testid={testId}>
        {value}
      </Text>
      <Text size="xs" c="dimmed">
        {detail}
      </Text>
    </Paper>
  );
}

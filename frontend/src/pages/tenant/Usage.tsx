import { Grid, Paper, SegmentedControl, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { api, type Schemas, unwrap, unwrapJson } from "../../api/client";
import { keys, useSpend } from "../../api/queries";
import { Chart } from "../../components/Chart";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { gpuHours, money, number, words } from "../../lib/format";
import { useOrgId } from "../../lib/orgId";
import { t } from "../../i18n";

const RANGES = { "7": "usage.last7", "30": "usage.last30", "90": "usage.last90" } as const;
type Range = keyof typeof RANGES;
const BREAKDOWNS = ["gpu_model", "project", "region", "order"] as const;

/** Every UTC day of the period, `YYYY-MM-DD`, so a day without usage still has its place. */
export function daysOf(span: { from: string; to: string }): string[] {
  const days: string[] = [];
  const end = Date.parse(span.to);
  for (let at = Date.parse(span.from); at < end; at += 86_400_000) days.push(new Date(at).toISOString().slice(0, 10));
  return days;
}

function window(days: number) {
  const to = new Date();
  to.setUTCHours(to.getUTCHours() + 1, 0, 0, 0);
  const from = new Date(to);
  from.setUTCDate(from.getUTCDate() - days);
  from.setUTCHours(0, 0, 0, 0);
  return { from: from.toISOString(), to: to.toISOString() };
}

export function UsagePage() {
  const orgId = useOrgId();
  const [range, setRange] = useState<Range>("30");
  const [breakdown, setBreakdown] = useState<(typeof BREAKDOWNS)[number]>("gpu_model");
  const span = useMemo(() => window(Number(range)), [range]);

  const usage = (groupBy: Schemas["GroupBy"]) => ({
    queryKey: keys.org(orgId, "usage", groupBy, span),
    queryFn: () =>
      unwrapJson(
        api.GET("/api/v1/orgs/{org_id}/usage", {
          params: { path: { org_id: orgId }, query: { group_by: groupBy, from: span.from, to: span.to } },
        }),
      ),
    refetchInterval: 30_000,
  });
  const byDay = useQuery(usage("day"));
  const byGroup = useQuery(usage(breakdown));
  const invoices = useQuery({
    queryKey: keys.org(orgId, "invoices"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/invoices", { params: { path: { org_id: orgId }, query: { limit: 24 } } })),
  });
  const month = useSpend(orgId);
  const spend = useSpend(orgId, span);

  return (
    <>
      <PageHeader
        title={t("usage.title")}
        subtitle={t("usage.subtitle")}
        actions={
          <SegmentedControl
            aria-label={t("usage.period")}
            data={Object.entries(RANGES).map(([value, label]) => ({ value, label: t(label) }))}
            value={range}
            onChange={(v) => setRange(v as Range)}
          />
        }
      />
      <Grid>
        <Grid.Col span={{ base: 12, lg: 7 }}>
          <Paper withBorder p="md">
            <Title order={4} mb="xs">
              {t("usage.perDay")}
            </Title>
            <Loadable query={byDay}>
              {(data) => {
                const days = daysOf(span);
                const byKey = new Map(data.groups.map((g) => [g.key, g]));
                const cost = new Map((spend.data?.days ?? []).map((d) => [d.key, d.amount_micros]));
                return data.groups.length === 0 ? (
                  <EmptyState title={t("usage.noUsage")} />
                ) : (
                  <>
                    <Text size="sm" c="dimmed" data-testid="usage-total">
                      {t("usage.billableTotal", { hours: gpuHours(data.totals.billable_gpu_seconds) })}
                      {data.totals.excluded_gpu_seconds > 0 && t("usage.excludedTotal", { hours: gpuHours(data.totals.excluded_gpu_seconds) })}
                      {data.totals.storage_gib_seconds > 0 && t("usage.storageTotal", { gibHours: number(Math.round(data.totals.storage_gib_seconds / 36) / 100) })}
                      {spend.data &&
                        t("usage.costTotal", {
                          cost: money(
                            spend.data.days.reduce((sum, d) => sum + d.amount_micros, 0),
                            spend.data.currency,
                          ),
                        })}
                    </Text>
                    <Chart
                      label={t("usage.perDay")}
                      option={{
                        tooltip: { trigger: "axis" },
                        legend: { bottom: 0 },
                        grid: { left: 56, right: 64, top: 32, bottom: 56 },
                        xAxis: { type: "category", data: days },
                        yAxis: [
                          { type: "value", name: t("usage.gpuHoursAxis"), nameGap: 12 },
                          {
                            type: "value",
                            name: spend.data?.currency ?? "USD",
                            nameGap: 12,
                            splitLine: { show: false },
                            axisLabel: { formatter: (v: number) => money(v * 1_000_000, spend.data?.currency) },
                          },
                        ],
                        series: [
                          { name: t("usage.billableSeries"), type: "bar", stack: "h", data: days.map((d) => +((byKey.get(d)?.billable_gpu_seconds ?? 0) / 3600).toFixed(2)) },
                          { name: t("usage.excludedSeries"), type: "bar", stack: "h", data: days.map((d) => +((byKey.get(d)?.excluded_gpu_seconds ?? 0) / 3600).toFixed(2)) },
                          { name: t("usage.costSeries"), type: "line", yAxisIndex: 1, data: days.map((d) => (cost.get(d) ?? 0) / 1_000_000) },
                        ],
                      }}
                    />
                  </>
                );
              }}
            </Loadable>
          </Paper>
        </Grid.Col>
        <Grid.Col span={{ base: 12, lg: 5 }}>
          <Paper withBorder p="md">
            <Title order={4} mb="xs">
              {t("usage.perMonth")}
            </Title>
            <Loadable query={invoices}>
              {(data) => {
                const months = [...data.items]
                  .filter((i) => i.status !== "void")
                  .sort((a, b) => a.period_start.localeCompare(b.period_start))
                  .map((i) => ({ month: i.period_start.slice(0, 7), total: i.total_micros, currency: i.currency }));
                const current = month.data?.from.slice(0, 7);
                if (month.data && current && !months.some((m) => m.month === current)) {
                  months.push({ month: t("usage.soFar", { month: current }), total: month.data.total_micros, currency: month.data.currency });
                }
                if (months.length === 0) return <EmptyState title={t("usage.noCharges")} />;
                return (
                  <Chart
                    label={t("usage.perMonth")}
                    option={{
                      tooltip: { trigger: "axis", valueFormatter: (v: unknown) => money(Number(v) * 1_000_000, months[0]?.currency) },
                      grid: { left: 64, right: 16, top: 24, bottom: 32 },
                      xAxis: { type: "category", data: months.map((m) => m.month) },
                      yAxis: { type: "value", name: months[0]?.currency, axisLabel: { formatter: (v: number) => money(v * 1_000_000, months[0]?.currency) } },
                      series: [{ name: t("usage.costSeries"), type: "bar", data: months.map((m) => m.total / 1_000_000) }],
                    }}
                  />
                );
              }}
            </Loadable>
          </Paper>
        </Grid.Col>
        <Grid.Col span={12}>
          <Paper withBorder p="md">
            <Title order={4} mb="xs">
              {t("usage.breakdown")}
            </Title>
            <SegmentedControl
              mb="sm"
              aria-label={t("usage.groupBy")}
              data={BREAKDOWNS.map((b) => ({ value: b, label: words(b) }))}
              value={breakdown}
              onChange={(v) => setBreakdown(v as (typeof BREAKDOWNS)[number])}
            />
            <Loadable query={byGroup}>
              {(data) =>
                data.groups.length === 0 ? (
                  <Text c="dimmed" size="sm">
                    {t("usage.noUsageText")}
                  </Text>
                ) : (
                  <Table.ScrollContainer minWidth={560}>
                    <Table aria-label={t("usage.breakdownAria")}>
                      <Table.Thead>
                        <Table.Tr>
                          <Table.Th>{words(breakdown)}</Table.Th>
                          <Table.Th ta="right">{t("usage.billable")}</Table.Th>
                          <Table.Th ta="right">{t("usage.excluded")}</Table.Th>
                          <Table.Th ta="right">{t("usage.nodeHours")}</Table.Th>
                          <Table.Th ta="right">{t("usage.storageGibHours")}</Table.Th>
                          {breakdown === "order" && <Table.Th ta="right">{t("usage.utilization")}</Table.Th>}
                        </Table.Tr>
                      </Table.Thead>
                      <Table.Tbody>
                        {data.groups.map((g) => (
                          <Table.Tr key={g.key || "none"}>
                            <Table.Td>{g.label || t("usage.noProject")}</Table.Td>
                            <Table.Td ta="right">{gpuHours(g.billable_gpu_seconds)}</Table.Td>
                            <Table.Td ta="right">{gpuHours(g.excluded_gpu_seconds)}</Table.Td>
                            <Table.Td ta="right">{number(Math.round(g.node_seconds / 36) / 100)}</Table.Td>
                            <Table.Td ta="right">{number(Math.round(g.storage_gib_seconds / 36) / 100)}</Table.Td>
                            {breakdown === "order" && (
                              <Table.Td ta="right">
                                {g.mean_gpu_utilization_percent === null || g.mean_gpu_utilization_percent === undefined
                                  ? "—"
                                  : `${Math.round(g.mean_gpu_utilization_percent)} %`}
                              </Table.Td>
                            )}
                          </Table.Tr>
                        ))}
                      </Table.Tbody>
                    </Table>
                  </Table.ScrollContainer>
                )
              }
            </Loadable>
          </Paper>
        </Grid.Col>
      </Grid>
    </>
  );
}

import { Grid, Paper, SegmentedControl, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { type ReactNode, useState } from "react";
import { api, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { Chart } from "../../components/Chart";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { t } from "../../i18n";
import { duration, number } from "../../lib/format";
import { find, type History, latest, models, pointsOf, tenantHours } from "../../lib/trends";

type Range = History["range"];
const RANGES: Range[] = ["hour", "day", "week"];
/** Tenants drawn by name; the rest are summed. */
const TOP_TENANTS = 8;

const GRID = { left: 48, right: 56, top: 32, bottom: 64 };
const LEGEND = { bottom: 0, type: "scroll" } as const;

/** The whole range on the time axis, so a new installation's first points sit at its end. */
function timeAxis(history: History) {
  return { type: "time", min: history.from, max: history.to } as const;
}

export function TrendsPage() {
  const [range, setRange] = useState<Range>("hour");
  const history = useQuery({
    queryKey: keys.admin("history", range),
    queryFn: () => unwrap(api.GET("/api/v1/admin/history", { params: { query: { range } } })),
    refetchInterval: range === "hour" ? 30_000 : 300_000,
  });

  return (
    <>
      <PageHeader
        title={t("trends.title")}
        subtitle={t("trends.subtitle")}
        actions={
          <SegmentedControl
            aria-label={t("trends.range")}
            data={RANGES.map((value) => ({ value, label: t(`trends.ranges.${value}`) }))}
            value={range}
            onChange={(v) => setRange(v as Range)}
          />
        }
      />
      <Loadable query={history}>
        {(h) =>
          h.series.length === 0 ? (
            <EmptyState title={t("trends.emptyTitle")}>{t("trends.emptyBody", { interval: duration(h.interval_seconds) })}</EmptyState>
          ) : (
            <Grid>
              {models(h).map((model) => (
                <Grid.Col span={{ base: 12, lg: 6 }} key={model}>
                  <Capacity history={h} model={model} />
                </Grid.Col>
              ))}
              <Grid.Col span={{ base: 12, lg: 6 }}>
                <Queue history={h} />
              </Grid.Col>
              <Grid.Col span={{ base: 12, lg: 6 }}>
                <Tenants history={h} />
              </Grid.Col>
              <Grid.Col span={{ base: 12, lg: 6 }}>
                <Utilization history={h} />
              </Grid.Col>
            </Grid>
          )
        }
      </Loadable>
      <Text size="xs" c="dimmed" mt="md">
        {history.data && t("trends.footnote", { step: duration(history.data.step_seconds), interval: duration(history.data.interval_seconds) })}
      </Text>
    </>
  );
}

function Panel({ title, summary, testId, children }: { title: string; summary: string; testId: string; children: ReactNode }) {
  return (
    <Paper withBorder p="md">
      <Title order={4}>{title}</Title>
      <Text size="sm" c="dimmed" data-testid={testId}>
        {summary}
      </Text>
      {children}
    </Paper>
  );
}

/** A chart over the history's whole range, with the page's legend and grid. */
function TimeChart({ history, label, yAxis, series }: { history: History; label: string; yAxis: object | object[]; series: object[] }) {
  return (
    <Chart
      label={label}
      option={{ tooltip: { trigger: "axis" }, legend: LEGEND, grid: GRID, xAxis: timeAxis(history), yAxis, series }}
    />
  );
}

/** A line whose points show as dots while there are few of them to join. */
function line(name: string, data: [string, number][]) {
  return { name, type: "line", showSymbol: data.length < 20, data } as const;
}

const shown = (value: number | undefined) => (value === undefined ? "—" : number(Math.round(value * 10) / 10));

function Capacity({ history, model }: { history: History; model: string }) {
  const lines = [
    { metric: "gpus_allocated", name: t("trends.allocated") },
    { metric: "gpus_free", name: t("trends.free") },
    { metric: "gpus_schedulable", name: t("trends.schedulable") },
  ] as const;
  const title = t("trends.gpus", { model });
  return (
    <Panel
      title={title}
      testId={`trend-gpus-${model}`}
      summary={t("trends.gpusNow", {
        allocated: shown(latest(find(history, "gpus_allocated", model))),
        free: shown(latest(find(history, "gpus_free", model))),
        schedulable: shown(latest(find(history, "gpus_schedulable", model))),
      })}
    >
      <TimeChart
        history={history}
        label={title}
        yAxis={{ type: "value", name: t("trends.gpusAxis"), minInterval: 1 }}
        series={lines.map(({ metric, name }) => line(name, pointsOf(find(history, metric, model))))}
      />
    </Panel>
  );
}

function Queue({ history }: { history: History }) {
  const pending = find(history, "pending_orders");
  const wait = find(history, "admission_wait_p95_seconds");
  const p95 = latest(wait);
  return (
    <Panel
      title={t("trends.queue")}
      testId="trend-queue"
      summary={t("trends.queueNow", { pending: shown(latest(pending)), wait: p95 === undefined ? "—" : duration(p95) })}
    >
      <TimeChart
        history={history}
        label={t("trends.queue")}
        yAxis={[
          { type: "value", name: t("trends.ordersAxis"), minInterval: 1 },
          { type: "value", name: t("trends.secondsAxis"), splitLine: { show: false } },
        ]}
        series={[line(t("trends.pending"), pointsOf(pending)), { ...line(t("trends.waitP95"), pointsOf(wait)), yAxisIndex: 1 }]}
      />
    </Panel>
  );
}

function Tenants({ history }: { history: History }) {
  const tenants = tenantHours(history, TOP_TENANTS, t("trends.otherTenants"));
  const total = tenants.reduce((sum, tenant) => sum + tenant.total, 0);
  return (
    <Panel title={t("trends.tenantHours")} testId="trend-tenants" summary={t("trends.tenantHoursTotal", { hours: number(Math.round(total * 100) / 100) })}>
      {tenants.length === 0 ? (
        <EmptyState title={t("trends.noTenantHours")} />
      ) : (
        <TimeChart
          history={history}
          label={t("trends.tenantHours")}
          yAxis={{ type: "value", name: t("trends.gpuHoursAxis") }}
          series={tenants.map((tenant) => ({ name: tenant.name, type: "bar", stack: "hours", data: tenant.points }))}
        />
      )}
    </Panel>
  );
}

function Utilization({ history }: { history: History }) {
  const series = history.series.filter((s) => s.metric === "gpu_utilization_ratio");
  return (
    <Panel
      title={t("trends.utilization")}
      testId="trend-utilization"
      summary={series.length === 0 ? t("trends.noTelemetry") : t("trends.utilizationModels", { count: series.length })}
    >
      {series.length > 0 && (
        <TimeChart
          history={history}
          label={t("trends.utilization")}
          yAxis={{ type: "value", min: 0, max: 100, name: "%" }}
          series={series.map((s) =>
            line(
              s.gpu_model ?? "",
              s.points.map((p) => [p.at, Math.round(p.value * 1000) / 10]),
            ),
          )}
        />
      )}
    </Panel>
  );
}

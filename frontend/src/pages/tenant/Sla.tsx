import { Group, Paper, Table, Text, TextInput, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime, duration, money, permyriad, words, shortId } from "../../lib/format";
import { useOrgId } from "../../lib/orgId";
import { t } from "../../i18n";

export function thisMonth(): string {
  return new Date().toISOString().slice(0, 7);
}

/** A month as the SLA report takes it: `YYYY-MM`. */
export function isMonth(value: string): boolean {
  return /^\d{4}-(0[1-9]|1[0-2])$/.test(value);
}

export function SlaPage() {
  const orgId = useOrgId();
  const [month, setMonth] = useState(thisMonth());
  const valid = isMonth(month);
  const report = useQuery({
    queryKey: keys.org(orgId, "sla", month),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/sla", { params: { path: { org_id: orgId }, query: { month } } })),
    enabled: valid,
  });
  return (
    <>
      <PageHeader
        title={t("sla.title")}
        subtitle={t("sla.subtitle")}
        actions={
          <TextInput
            label={t("sla.month")}
            type="month"
            value={month}
            onChange={(e) => setMonth(e.currentTarget.value)}
            error={valid ? undefined : "YYYY-MM"}
          />
        }
      />
      {valid && <Loadable query={report}>{(data) => <SlaReportView report={data} />}</Loadable>}
    </>
  );
}

export function SlaReportView({ report }: { report: Schemas["SlaReport"] }) {
  return (
    <>
      <Text size="sm" c="dimmed" mb="sm">
        {t("sla.measured", { at: dateTime(report.measured_until), credits: money(report.credits_micros) })}
      </Text>
      {report.classes.length === 0 ? (
        <EmptyState title={t("sla.nothingTitle")}>{t("sla.nothingBody")}</EmptyState>
      ) : (
        <Paper withBorder mb="md">
          <Table.ScrollContainer minWidth={720}>
            <Table aria-label={t("sla.perClass")}>
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t("sla.class")}</Table.Th>
                  <Table.Th ta="right">{t("sla.orders")}</Table.Th>
                  <Table.Th ta="right">{t("sla.target")}</Table.Th>
                  <Table.Th ta="right">{t("sla.availability")}</Table.Th>
                  <Table.Th ta="right">{t("sla.downtime")}</Table.Th>
                  <Table.Th ta="right">{t("sla.onTime")}</Table.Th>
                  <Table.Th ta="right">{t("sla.credits")}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {report.classes.map((c) => (
                  <Table.Tr key={c.priority_class}>
                    <Table.Td>{words(c.priority_class)}</Table.Td>
                    <Table.Td ta="right">{c.orders}</Table.Td>
                    <Table.Td ta="right">{permyriad(c.availability_target_permyriad)}</Table.Td>
                    <Table.Td ta="right" c={c.availability_permyriad < c.availability_target_permyriad ? "red" : undefined}>
                      {permyriad(c.availability_permyriad)}
                    </Table.Td>
                    <Table.Td ta="right">{duration(c.downtime_seconds)}</Table.Td>
                    <Table.Td ta="right">
                      {c.waits_measured ? `${c.waits_met} / ${c.waits_measured}` : "—"}
                    </Table.Td>
                    <Table.Td ta="right">{money(c.credits_micros)}</Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        </Paper>
      )}
      {report.orders.some((o) => o.downtime_seconds > 0 || o.credit_micros > 0) && (
        <Paper withBorder p="md">
          <Title order={4} mb="sm">
            {t("sla.incidents")}
          </Title>
          {report.orders
            .filter((o) => o.downtime_seconds > 0 || o.credit_micros > 0)
            .map((o) => (
              <Group key={o.order_id} justify="space-between" py={4}>
                <Text size="sm" ff="monospace">
                  {shortId(o.order_id)}
                </Text>
                <Text size="sm">
                  {t("sla.incident", {
                    availability: permyriad(o.availability_permyriad),
                    down: duration(o.downtime_seconds),
                    evidence: o.evidence.map((e) => t("sla.evidenceOn", { kind: words(e.kind), node: e.node })).join(", ") || t("sla.noEvidence"),
                  })}
                </Text>
                <Text size="sm">{t("sla.credit", { percent: o.credit_percent, amount: money(o.credit_micros) })}</Text>
              </Group>
            ))}
        </Paper>
      )}
    </>
  );
}

import { Button, Group, Paper, Table, Text, Title } from "@mantine/core";
import { useMutation, useQuery } from "@tanstack/react-query";
import { useParams } from "@tanstack/react-router";
import { api, unwrap, unwrapJson } from "../../api/client";
import { keys } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { billingPeriod, dateTime, duration, money, words } from "../../lib/format";
import { notifyError } from "../../lib/notify";
import classes from "./InvoiceDetail.module.css";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";

export function InvoiceDetailPage() {
  const { orgId, invoiceId } = useParams({ strict: false }) as { orgId: string; invoiceId: string };
  const invoice = useQuery({
    queryKey: keys.org(orgId, "invoice", invoiceId),
    queryFn: () =>
      unwrapJson(
        api.GET("/api/v1/orgs/{org_id}/invoices/{invoice_id}", {
          params: { path: { org_id: orgId, invoice_id: invoiceId } },
        }),
      ),
  });
  // The CSV needs the session's token, so it is fetched, then saved.
  const csv = useMutation({
    mutationFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/invoices/{invoice_id}", {
          params: { path: { org_id: orgId, invoice_id: invoiceId }, query: { format: "csv" } },
          parseAs: "blob",
        }),
      ),
    onSuccess: (blob) => {
      const url = URL.createObjectURL(blob);
      const link = document.createElement("a");
      link.href = url;
      link.download = `invoice-${invoiceId}.csv`;
      link.click();
      URL.revokeObjectURL(url);
    },
    onError: (error) => notifyError(error, t("invoice.csvFailed")),
  });

  return (
    <Loadable query={invoice}>
      {(i) => (
        <div className={classes.printable}>
          <PageHeader
            title={t("invoice.title", { period: billingPeriod(i.period_start, i.period_end) })}
            subtitle={
              <AnchorLink to="/orgs/$orgId/invoices" params={{ orgId }} size="sm" className={classes.noPrint}>
                {t("invoice.all")}
              </AnchorLink>
            }
            actions={
              <Group className={classes.noPrint}>
                <Button variant="default" onClick={() => csv.mutate()} loading={csv.isPending}>
                  {t("invoice.downloadCsv")}
                </Button>
                <Button onClick={() => window.print()}>{t("invoice.print")}</Button>
              </Group>
            }
          />
          <Paper withBorder p="md">
            <Group justify="space-between" mb="md">
              <div>
                <Text size="sm" c="dimmed">
                  {t("invoice.number", { id: i.id })}
                </Text>
                <Text size="sm">{t("invoice.rated", { at: dateTime(i.rated_at) })}</Text>
                {i.finalized_at && <Text size="sm">{t("invoice.finalized", { at: dateTime(i.finalized_at) })}</Text>}
              </div>
              <StatusBadge status={i.status} />
            </Group>
            <Table.ScrollContainer minWidth={720}>
              <Table aria-label={t("invoice.lines")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("invoice.line")}</Table.Th>
                    <Table.Th>{t("invoice.kind")}</Table.Th>
                    <Table.Th ta="right">{t("invoice.time")}</Table.Th>
                    <Table.Th ta="right">{t("invoice.gpuHours")}</Table.Th>
                    <Table.Th ta="right">{t("invoice.rate")}</Table.Th>
                    <Table.Th ta="right">{t("invoice.amount")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {i.lines.map((line) => (
                    <Table.Tr key={line.position}>
                      <Table.Td>
                        {line.description}
                        {line.reason && (
                          <Text size="xs" c="dimmed">
                            {line.reason}
                          </Text>
                        )}
                      </Table.Td>
                      <Table.Td>{words(line.kind)}</Table.Td>
                      <Table.Td ta="right">{line.quantity_seconds ? duration(line.quantity_seconds) : "—"}</Table.Td>
                      <Table.Td ta="right">{line.gpu_seconds ? (line.gpu_seconds / 3600).toFixed(2) : "—"}</Table.Td>
                      <Table.Td ta="right">
                        {line.hourly_micros !== null && line.hourly_micros !== undefined ? money(line.hourly_micros, i.currency) : "—"}
                      </Table.Td>
                      <Table.Td ta="right">{money(line.amount_micros, i.currency)}</Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
                <Table.Tfoot>
                  <Total label={t("invoice.subtotal")} amount={money(i.subtotal_micros, i.currency)} />
                  {/* Both are signed as they change the total: a discount or credit is negative, a charge positive. */}
                  <Total label={t("invoice.discount")} amount={money(i.discount_micros, i.currency)} />
                  <Total label={t("invoice.credits")} amount={money(i.credits_micros, i.currency)} />
                  <Total label={t("invoice.total")} amount={money(i.total_micros, i.currency)} strong />
                </Table.Tfoot>
              </Table>
            </Table.ScrollContainer>
          </Paper>
          {i.lines.length === 0 && (
            <Title order={5} c="dimmed" mt="md">
              {t("invoice.noCharges")}
            </Title>
          )}
        </div>
      )}
    </Loadable>
  );
}

function Total({ label, amount, strong }: { label: string; amount: string; strong?: boolean }) {
  return (
    <Table.Tr>
      <Table.Td colSpan={5} ta="right" fw={strong ? 700 : 400}>
        {label}
      </Table.Td>
      <Table.Td ta="right" fw={strong ? 700 : 400}>
        {amount}
      </Table.Td>
    </Table.Tr>
  );
}

// An organization's invoices as its operator handles them: issue a draft
// for last month, re-rate a draft, finalize it, mark it paid or void it.
import { Button, Group, Paper, Table, Text, Title } from "@mantine/core";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { AnchorLink } from "../../components/links";
import { Loadable } from "../../components/Loadable";
import { StatusBadge } from "../../components/StatusBadge";
import { t } from "../../i18n";
import { billingPeriod, money } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";

type Action = "rate" | "finalize" | "pay" | "void";

/** The calendar month before the one `now` is in, in UTC. */
export function lastMonth(now: Date): { period_start: string; period_end: string } {
  const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const start = new Date(Date.UTC(end.getUTCFullYear(), end.getUTCMonth() - 1, 1));
  return { period_start: start.toISOString(), period_end: end.toISOString() };
}

export function OrgInvoices({ orgId }: { orgId: string }) {
  const queryClient = useQueryClient();
  const invoices = useQuery({
    queryKey: keys.org(orgId, "invoices"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/invoices", { params: { path: { org_id: orgId }, query: { limit: 24 } } })),
  });
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "invoices") });
  const issue = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/admin/orgs/{org_id}/invoices", { params: { path: { org_id: orgId } }, body: lastMonth(new Date()) })),
    onSuccess: (invoice) => {
      notifySuccess(t("orgInvoices.issued", { period: billingPeriod(invoice.period_start, invoice.period_end) }));
      refresh();
    },
    onError: (error) => notifyError(error),
  });
  const act = useMutation({
    mutationFn: ({ id, action }: { id: string; action: Action }) => {
      const params = { params: { path: { invoice_id: id } } };
      switch (action) {
        case "rate":
          return unwrap(api.POST("/api/v1/admin/invoices/{invoice_id}/rate", params));
        case "finalize":
          return unwrap(api.POST("/api/v1/admin/invoices/{invoice_id}/finalize", params));
        case "pay":
          return unwrap(api.POST("/api/v1/admin/invoices/{invoice_id}/pay", params));
        case "void":
          return unwrap(api.POST("/api/v1/admin/invoices/{invoice_id}/void", params));
      }
    },
    onSuccess: (invoice) => {
      notifySuccess(t("orgInvoices.now", { status: t(`enum.${invoice.status}`) }));
      refresh();
    },
    onError: (error) => notifyError(error),
  });
  const busy = (invoice: Schemas["InvoiceSummary"]) => act.isPending && act.variables?.id === invoice.id;
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>{t("orgInvoices.title")}</Title>
        <Button size="xs" variant="light" onClick={() => issue.mutate()} loading={issue.isPending}>
          {t("orgInvoices.issue")}
        </Button>
      </Group>
      <Loadable query={invoices}>
        {(page) =>
          page.items.length === 0 ? (
            <Text size="sm" c="dimmed">
              {t("orgInvoices.none")}
            </Text>
          ) : (
            <Table.ScrollContainer minWidth={520}>
              <Table aria-label={t("orgInvoices.title")}>
                <Table.Tbody>
                  {page.items.map((invoice) => (
                    <Table.Tr key={invoice.id}>
                      <Table.Td>
                        <AnchorLink to="/orgs/$orgId/invoices/$invoiceId" params={{ orgId, invoiceId: invoice.id }} size="sm">
                          {billingPeriod(invoice.period_start, invoice.period_end)}
                        </AnchorLink>
                      </Table.Td>
                      <Table.Td>
                        <StatusBadge status={invoice.status} />
                      </Table.Td>
                      <Table.Td ta="right">{money(invoice.total_micros, invoice.currency)}</Table.Td>
                      <Table.Td>
                        <Group gap={4} justify="flex-end" wrap="nowrap">
                          {invoice.status === "draft" && (
                            <>
                              <Button size="compact-xs" variant="default" loading={busy(invoice)} onClick={() => act.mutate({ id: invoice.id, action: "rate" })}>
                                {t("orgInvoices.rate")}
                              </Button>
                              <ConfirmButton
                                size="compact-xs"
                                color="blue"
                                label={t("orgInvoices.finalize")}
                                title={t("orgInvoices.finalizeTitle")}
                                message={t("orgInvoices.finalizeBody")}
                                confirmLabel={t("orgInvoices.finalize")}
                                onConfirm={() => act.mutate({ id: invoice.id, action: "finalize" })}
                              />
                            </>
                          )}
                          {invoice.status === "finalized" && (
                            <Button size="compact-xs" variant="default" loading={busy(invoice)} onClick={() => act.mutate({ id: invoice.id, action: "pay" })}>
                              {t("orgInvoices.pay")}
                            </Button>
                          )}
                          {(invoice.status === "draft" || invoice.status === "finalized") && (
                            <ConfirmButton
                              size="compact-xs"
                              label={t("orgInvoices.void")}
                              title={t("orgInvoices.voidTitle")}
                              message={t("orgInvoices.voidBody")}
                              confirmLabel={t("orgInvoices.void")}
                              onConfirm={() => act.mutate({ id: invoice.id, action: "void" })}
                            />
                          )}
                        </Group>
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          )
        }
      </Loadable>
    </Paper>
  );
}

import { Paper, Table } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";

import { api, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { billingPeriod, money } from "../../lib/format";
import { useOrgId } from "../../lib/orgId";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";

export function InvoicesPage() {
  const orgId = useOrgId();
  const invoices = useQuery({
    queryKey: keys.org(orgId, "invoices"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/invoices", { params: { path: { org_id: orgId }, query: { limit: 24 } } })),
  });
  return (
    <>
      <PageHeader title={t("invoices.title")} subtitle={t("invoices.subtitle")} />
      <Loadable query={invoices}>
        {(data) =>
          data.items.length === 0 ? (
            <EmptyState title={t("invoices.emptyTitle")}>{t("invoices.emptyBody")}</EmptyState>
          ) : (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={600}>
                <Table striped highlightOnHover aria-label={t("invoices.title")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("invoices.period")}</Table.Th>
                      <Table.Th>{t("invoices.status")}</Table.Th>
                      <Table.Th ta="right">{t("invoices.subtotal")}</Table.Th>
                      <Table.Th ta="right">{t("invoices.discountsCredits")}</Table.Th>
                      <Table.Th ta="right">{t("invoices.total")}</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {data.items.map((i) => (
                      <Table.Tr key={i.id}>
                        <Table.Td>
                          <AnchorLink to="/orgs/$orgId/invoices/$invoiceId" params={{ orgId, invoiceId: i.id }}>
                            {billingPeriod(i.period_start, i.period_end)}
                          </AnchorLink>
                        </Table.Td>
                        <Table.Td>
                          <StatusBadge status={i.status} />
                        </Table.Td>
                        <Table.Td ta="right">{money(i.subtotal_micros, i.currency)}</Table.Td>
                        <Table.Td ta="right">{money(-(i.discount_micros + i.credits_micros), i.currency)}</Table.Td>
                        <Table.Td ta="right" fw={600}>
                          {money(i.total_micros, i.currency)}
                        </Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Paper>
          )
        }
      </Loadable>
    </>
  );
}

import { Paper, Table } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";

import { api, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { date, money } from "../../lib/format";
import { useOrgId } from "../../lib/orgId";
import { AnchorLink } from "../../components/links";

export function InvoicesPage() {
  const orgId = useOrgId();
  const invoices = useQuery({
    queryKey: keys.org(orgId, "invoices"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/invoices", { params: { path: { org_id: orgId }, query: { limit: 24 } } })),
  });
  return (
    <>
      <PageHeader title="Invoices" subtitle="One per month once its usage is final; drafts change until finalized." />
      <Loadable query={invoices}>
        {(data) =>
          data.items.length === 0 ? (
            <EmptyState title="No invoices yet">The first one appears after your first month of usage.</EmptyState>
          ) : (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={600}>
                <Table striped highlightOnHover aria-label="Invoices">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Period</Table.Th>
                      <Table.Th>Status</Table.Th>
                      <Table.Th ta="right">Subtotal</Table.Th>
                      <Table.Th ta="right">Discounts & credits</Table.Th>
                      <Table.Th ta="right">Total</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {data.items.map((i) => (
                      <Table.Tr key={i.id}>
                        <Table.Td>
                          <AnchorLink to="/orgs/$orgId/invoices/$invoiceId" params={{ orgId, invoiceId: i.id }}>
                            {date(i.period_start)} – {date(i.period_end)}
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

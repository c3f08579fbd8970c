import { Paper, ScrollArea, SegmentedControl, Table, Text } from "@mantine/core";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { gpusOf, regionOf, runtimeSeconds, useOrders } from "../../api/orders";
import type { Schemas } from "../../api/client";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { LoadMore } from "../../components/LoadMore";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { WaitReasons } from "../../components/WaitReasons";
import { dateTime, duration } from "../../lib/format";
import { useOperatorView, useOrgId } from "../../lib/orgId";
import { ButtonLink, OrderName } from "../../components/links";

const FILTERS = ["all", "queued", "running", "completed", "failed", "timed_out", "cancelled", "preempted"] as const;

export function OrdersPage() {
  const orgId = useOrgId();
  const viewing = useOperatorView(orgId);
  const search = useSearch({ strict: false }) as { status?: string; array?: string };
  const navigate = useNavigate();
  const status = FILTERS.includes(search.status as (typeof FILTERS)[number]) ? search.status : "all";
  const orders = useOrders(orgId, status === "all" ? undefined : (status as Schemas["OrderStatus"]), search.array);

  return (
    <>
      <PageHeader
        title="Orders"
        subtitle="GPU capacity your organization ordered; statuses refresh on their own."
        actions={
          !viewing && (
            <ButtonLink to="/orgs/$orgId/launch" params={{ orgId }}>
              Launch
            </ButtonLink>
          )
        }
      />
      <ScrollArea type="auto" mb="md" offsetScrollbars="x">
        <SegmentedControl
          aria-label="Filter by status"
          data={FILTERS.map((f) => ({ value: f, label: f.replace("_", " ") }))}
          value={status}
          onChange={(value) =>
            void navigate({
              to: "/orgs/$orgId/orders",
              params: { orgId },
              search: { ...(value === "all" ? {} : { status: value }), ...(search.array ? { array: search.array } : {}) },
            })
          }
        />
      </ScrollArea>
      <Loadable query={orders}>
        {(data) => {
          const items = data.pages.flatMap((p) => p.items);
          if (items.length === 0) {
            return (
              <EmptyState title="No orders here">
                {status === "all" ? "Launch GPU capacity to see it here." : `No ${status} orders.`}
              </EmptyState>
            );
          }
          return (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={760}>
                <Table striped highlightOnHover aria-label="Orders">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Order</Table.Th>
                      <Table.Th>Kind</Table.Th>
                      <Table.Th>Instance</Table.Th>
                      <Table.Th>GPUs</Table.Th>
                      <Table.Th>Region</Table.Th>
                      <Table.Th>Status</Table.Th>
                      <Table.Th>Why / where</Table.Th>
                      <Table.Th>Created</Table.Th>
                      <Table.Th>Runtime</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {items.map((order) => {
                      const runtime = runtimeSeconds(order);
                      return (
                        <Table.Tr key={order.id}>
                          <Table.Td>
                            <OrderName order={order} />
                          </Table.Td>
                          <Table.Td>
                            {order.kind}
                            {order.job?.array_index !== null && order.job?.array_index !== undefined && ` #${order.job.array_index}`}
                          </Table.Td>
                          <Table.Td>{order.instance_type}</Table.Td>
                          <Table.Td>{gpusOf(order)}</Table.Td>
                          <Table.Td>{regionOf(order)}</Table.Td>
                          <Table.Td>
                            <StatusBadge status={order.status} />
                          </Table.Td>
                          <Table.Td maw={320}>
                            <Text size="sm" lineClamp={2}>
                              {order.status === "queued" ? (
                                <WaitReasons orgId={orgId} order={order} short />
                              ) : (
                                order.failure_reason ??
                                (order.placement.map((p) => p.node_name).join(", ") || "—")
                              )}
                            </Text>
                          </Table.Td>
                          <Table.Td>{dateTime(order.created_at)}</Table.Td>
                          <Table.Td>{runtime === null ? "—" : duration(runtime)}</Table.Td>
                        </Table.Tr>
                      );
                    })}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
              <LoadMore query={orders} />
            </Paper>
          );
        }}
      </Loadable>
    </>
  );
}

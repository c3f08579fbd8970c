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
import { dateTime, duration, words } from "../../lib/format";
import { useAbilities, useOrgId } from "../../lib/orgId";
import { ButtonLink, OrderName } from "../../components/links";
import { t } from "../../i18n";

const FILTERS = ["all", "queued", "running", "completed", "failed", "timed_out", "cancelled", "preempted"] as const;

export function OrdersPage() {
  const orgId = useOrgId();
  const can = useAbilities(orgId);
  const search = useSearch({ strict: false }) as { status?: string; array?: string };
  const navigate = useNavigate();
  const status = FILTERS.includes(search.status as (typeof FILTERS)[number]) ? search.status : "all";
  const orders = useOrders(orgId, status === "all" ? undefined : (status as Schemas["OrderStatus"]), search.array);

  return (
    <>
      <PageHeader
        title={t("orders.title")}
        subtitle={t("orders.subtitle")}
        actions={
          can.order && (
            <ButtonLink to="/orgs/$orgId/launch" params={{ orgId }}>
              {t("orders.launch")}
            </ButtonLink>
          )
        }
      />
      <ScrollArea type="auto" mb="md" offsetScrollbars="x">
        <SegmentedControl
          aria-label={t("orders.filter")}
          data={FILTERS.map((f) => ({ value: f, label: f === "all" ? t("orders.all") : words(f) }))}
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
              <EmptyState title={t("orders.emptyTitle")}>
                {status === "all" ? t("orders.emptyAll") : t("orders.emptyStatus", { status: words(status) })}
              </EmptyState>
            );
          }
          return (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={760}>
                <Table striped highlightOnHover aria-label={t("orders.title")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("orders.order")}</Table.Th>
                      <Table.Th>{t("orders.status")}</Table.Th>
                      <Table.Th>{t("orders.kind")}</Table.Th>
                      <Table.Th>{t("orders.instance")}</Table.Th>
                      <Table.Th>{t("orders.gpus")}</Table.Th>
                      <Table.Th>{t("orders.region")}</Table.Th>
                      <Table.Th>{t("orders.whyWhere")}</Table.Th>
                      <Table.Th>{t("orders.created")}</Table.Th>
                      <Table.Th>{t("orders.runtime")}</Table.Th>
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
                            <StatusBadge status={order.status} />
                          </Table.Td>
                          <Table.Td>
                            {order.kind === "job" ? t("orders.kindJob") : t("orders.kindInstance")}
                            {order.job?.array_index !== null && order.job?.array_index !== undefined && ` #${order.job.array_index}`}
                          </Table.Td>
                          <Table.Td>{order.instance_type}</Table.Td>
                          <Table.Td>{gpusOf(order)}</Table.Td>
                          <Table.Td>{regionOf(order)}</Table.Td>
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

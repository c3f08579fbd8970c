import { Badge, Group, Paper, Stack, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "../../api/client";
import { gpuCount } from "../../api/orders";
import { keys, useOrgNames } from "../../api/queries";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { WaitReasons } from "../../components/WaitReasons";
import { DefragmentationPanel } from "./Defragmentation";
import { OrderName } from "../../components/links";
import { dateTime, words } from "../../lib/format";
import { t } from "../../i18n";

function useAdminOrders(status: Schemas["OrderStatus"]) {
  return useQuery({
    queryKey: keys.admin("orders", status),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orders", { params: { query: { status, limit: 200 } } })),
    select: (page) => page.items,
    refetchInterval: 3_000,
  });
}

export function QueuesPage() {
  const queued = useAdminOrders("queued");
  const running = useAdminOrders("running");
  const names = useOrgNames().data ?? new Map<string, string>();

  return (
    <>
      <PageHeader title={t("queues.title")} subtitle={t("queues.subtitle")} />
      <DefragmentationPanel />
      <Loadable query={queued}>
        {(waiting) => {
          if (waiting.length === 0) return <EmptyState title={t("queues.nothingTitle")}>{t("queues.nothingBody")}</EmptyState>;
          const byOrg = new Map<string, Schemas["Order"][]>();
          for (const order of [...waiting].sort((a, b) => a.created_at.localeCompare(b.created_at))) {
            byOrg.set(order.org_id, [...(byOrg.get(order.org_id) ?? []), order]);
          }
          return (
            <Stack>
              {[...byOrg.entries()].map(([orgId, orders]) => {
                const runningHere = (running.data ?? []).filter((o) => o.org_id === orgId);
                return (
                  <Paper withBorder p="md" key={orgId}>
                    <Group justify="space-between" mb="xs">
                      <Title order={4}>{names.get(orgId) ?? orgId}</Title>
                      <Group gap="xs">
                        <Badge color="yellow.4">
                          {t("queues.waiting", { count: orders.length, gpus: orders.reduce((n, o) => n + gpuCount(o), 0) })}
                        </Badge>
                        <Badge color="green.4">
                          {t("queues.running", { count: runningHere.length, gpus: runningHere.reduce((n, o) => n + gpuCount(o), 0) })}
                        </Badge>
                      </Group>
                    </Group>
                    <Table.ScrollContainer minWidth={760}>
                      <Table aria-label={t("queues.queueOf", { name: names.get(orgId) ?? orgId })}>
                        <Table.Thead>
                          <Table.Tr>
                            <Table.Th>#</Table.Th>
                            <Table.Th>{t("queues.order")}</Table.Th>
                            <Table.Th>{t("queues.shape")}</Table.Th>
                            <Table.Th>{t("queues.priority")}</Table.Th>
                            <Table.Th>{t("queues.since")}</Table.Th>
                            <Table.Th>{t("queues.why")}</Table.Th>
                            <Table.Th>{t("queues.estimated")}</Table.Th>
                          </Table.Tr>
                        </Table.Thead>
                        <Table.Tbody>
                          {orders.map((o, position) => (
                            <Table.Tr key={o.id}>
                              <Table.Td>{position + 1}</Table.Td>
                              <Table.Td>
                                <OrderName order={o} />
                              </Table.Td>
                              <Table.Td>
                                {o.node_count} × {o.instance_type}
                              </Table.Td>
                              <Table.Td>{words(o.priority_class)}</Table.Td>
                              <Table.Td>{dateTime(o.created_at)}</Table.Td>
                              <Table.Td maw={360}>
                                <Text size="sm">{o.pending_details.length > 0 ? <WaitReasons orgId={o.org_id} order={o} short reader={{ organization: names.get(o.org_id) ?? o.org_id }} /> : (o.pending_reason ?? "—")}</Text>
                              </Table.Td>
                              <Table.Td>
                                {dateTime(o.estimated_start)}
                                {o.estimate_confidence && (
                                  <Badge size="xs" variant="light" ml={6} color={o.estimate_confidence === "reserved" ? "teal" : "gray"}>
                                    {t(o.estimate_confidence === "reserved" ? "queues.reserved" : "queues.planned")}
                                  </Badge>
                                )}
                              </Table.Td>
                            </Table.Tr>
                          ))}
                        </Table.Tbody>
                      </Table>
                    </Table.ScrollContainer>
                  </Paper>
                );
              })}
            </Stack>
          );
        }}
      </Loadable>
    </>
  );
}

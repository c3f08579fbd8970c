import { Badge, Group, Paper, ScrollArea, SegmentedControl, Table, Text } from "@mantine/core";

import { useState } from "react";
import { useAllNodes } from "../../api/admin";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { dateTime, words } from "../../lib/format";
import { IsolationBadge, NodeActions } from "./NodeActions";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";
import { nodeState, nodeUse } from "../../lib/capacity";

const STATES = ["all", "ready", "cordoned", "draining", "unhealthy"] as const;

export function NodesPage() {
  const nodes = useAllNodes();
  const [state, setState] = useState<(typeof STATES)[number]>("all");
  return (
    <>
      <PageHeader title={t("nodes.title")} subtitle={t("nodes.subtitle")} />
      <ScrollArea type="auto" mb="md" offsetScrollbars="x">
        <SegmentedControl
          aria-label={t("nodes.filter")}
          data={STATES.map((s) => ({ value: s, label: s === "all" ? t("nodes.all") : words(s) }))}
          value={state}
          onChange={(v) => setState(v as typeof state)}
        />
      </ScrollArea>
      <Loadable query={nodes}>
        {(list) => {
          const shown = list.filter((n) => state === "all" || n.state === state);
          if (shown.length === 0) return <EmptyState title={t("nodes.none", { state: words(state) })} />;
          return (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={900}>
                <Table striped aria-label={t("nodes.title")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("nodes.node")}</Table.Th>
                      <Table.Th>{t("nodes.location")}</Table.Th>
                      <Table.Th>{t("nodes.type")}</Table.Th>
                      <Table.Th>{t("nodes.state")}</Table.Th>
                      <Table.Th>{t("nodes.gpus")}</Table.Th>
                      <Table.Th>{t("nodes.orders")}</Table.Th>
                      <Table.Th>{t("nodes.heartbeat")}</Table.Th>
                      <Table.Th>{t("nodes.actions")}</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {shown.map((n) => {
                      const use = nodeUse(n);
                      return (
                        <Table.Tr key={n.id}>
                          <Table.Td>
                            <AnchorLink to="/admin/nodes/$nodeId" params={{ nodeId: n.id }}>
                              {n.name}
                            </AnchorLink>
                            <Group gap={4}>
                              <Text size="xs" c="dimmed">
                                {words(n.driver)}
                              </Text>
                              <IsolationBadge node={n} />
                            </Group>
                          </Table.Td>
                          <Table.Td>
                            {n.region} / {n.rack || "—"}
                          </Table.Td>
                          <Table.Td>{n.instance_type ?? "—"}</Table.Td>
                          <Table.Td>
                            <StatusBadge status={nodeState(n)} />
                            {n.state !== "ready" && n.state_reason && (
                              <Text size="xs" c="dimmed" data-testid="node-reason" maw={220}>
                                {n.state_reason}
                              </Text>
                            )}
                          </Table.Td>
                          <Table.Td data-testid="node-gpus">
                            {use.whole} / {use.shared} / {use.free} / {use.unhealthy}
                            {use.mig && (
                              <Group gap={4} wrap="nowrap">
                                <Badge size="xs" variant="light" color="grape">
                                  {t("nodes.mig")}
                                </Badge>
                                <Text size="xs" c="dimmed">
                                  {t("nodes.migFree", { free: use.mig.free, total: use.mig.total })}
                                </Text>
                              </Group>
                            )}
                          </Table.Td>
                          <Table.Td>{use.orders}</Table.Td>
                          <Table.Td>{n.driver === "agent" ? dateTime(n.last_heartbeat_at) : words("simulated")}</Table.Td>
                          <Table.Td>
                            <NodeActions node={n} />
                          </Table.Td>
                        </Table.Tr>
                      );
                    })}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Paper>
          );
        }}
      </Loadable>
    </>
  );
}

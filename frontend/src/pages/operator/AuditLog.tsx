import { Code, Paper, Table, Text } from "@mantine/core";
import { useInfiniteQuery } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useOrgNames } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { LoadMore } from "../../components/LoadMore";
import { PageHeader } from "../../components/PageHeader";
import { dateTime, shortId } from "../../lib/format";
import { t } from "../../i18n";

export function AuditLogPage() {
  const names = useOrgNames().data ?? new Map<string, string>();
  const entries = useInfiniteQuery({
    queryKey: keys.admin("audit"),
    queryFn: ({ pageParam }) =>
      unwrap(api.GET("/api/v1/admin/audit-log", { params: { query: { limit: 100, cursor: pageParam } } })),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => page.next_cursor ?? undefined,
  });
  return (
    <>
      <PageHeader title={t("audit.title")} subtitle={t("audit.subtitle")} />
      <Loadable query={entries}>
        {(data) => (
          <Paper withBorder>
            <Table.ScrollContainer minWidth={900}>
              <Table striped aria-label={t("audit.title")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("audit.when")}</Table.Th>
                    <Table.Th>{t("audit.organization")}</Table.Th>
                    <Table.Th>{t("audit.actor")}</Table.Th>
                    <Table.Th>{t("audit.action")}</Table.Th>
                    <Table.Th>{t("audit.target")}</Table.Th>
                    <Table.Th>{t("audit.details")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.pages
                    .flatMap((p) => p.items)
                    .map((e) => (
                      <Table.Tr key={e.id}>
                        <Table.Td>{dateTime(e.created_at)}</Table.Td>
                        <Table.Td>{e.org_id ? (names.get(e.org_id) ?? shortId(e.org_id)) : t("audit.platform")}</Table.Td>
                        <Table.Td>
                          <Actor entry={e} />
                        </Table.Td>
                        <Table.Td>{e.action}</Table.Td>
                        <Table.Td>
                          {e.target_type}
                          {e.target_id ? ` ${shortId(e.target_id)}` : ""}
                        </Table.Td>
                        <Table.Td maw={360}>
                          <Code fz="xs" style={{ whiteSpace: "pre-wrap", wordBreak: "break-all" }}>
                            {JSON.stringify(e.details)}
                          </Code>
                        </Table.Td>
                      </Table.Tr>
                    ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
            <LoadMore query={entries} />
          </Paper>
        )}
      </Loadable>
    </>
  );
}

/** Who acted: a user by name and email, an API key by its name. */
export function Actor({ entry }: { entry: Schemas["AuditEntry"] }) {
  if (entry.actor_kind === "api_key") return <>{t("audit.apiKey", { name: entry.actor_name ?? (entry.actor_id ? shortId(entry.actor_id) : "") })}</>;
  if (!entry.actor_name && !entry.actor_email) return <>{entry.actor_kind === "anonymous" ? t("audit.system") : entry.actor_kind}</>;
  return (
    <>
      {entry.actor_name}
      {entry.actor_email && (
        <Text size="xs" c="dimmed">
          {entry.actor_email}
        </Text>
      )}
    </>
  );
}

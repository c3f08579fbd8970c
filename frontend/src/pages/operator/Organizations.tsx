import { Paper, Table } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";

import { api, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime } from "../../lib/format";
import { AnchorLink } from "../../components/links";
import { t } from "../../i18n";

export function OrganizationsPage() {
  const orgs = useQuery({
    queryKey: keys.admin("orgs"),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orgs", { params: { query: { limit: 200 } } })),
  });
  return (
    <>
      <PageHeader title={t("organizations.title")} subtitle={t("organizations.subtitle")} />
      <Loadable query={orgs}>
        {(page) => (
          <Paper withBorder>
            <Table striped highlightOnHover aria-label={t("organizations.title")}>
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t("organizations.name")}</Table.Th>
                  <Table.Th>{t("organizations.id")}</Table.Th>
                  <Table.Th>{t("organizations.created")}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {page.items.map((o) => (
                  <Table.Tr key={o.id}>
                    <Table.Td>
                      <AnchorLink to="/admin/orgs/$orgId" params={{ orgId: o.id }}>
                        {o.name}
                      </AnchorLink>
                    </Table.Td>
                    <Table.Td ff="monospace">{o.id}</Table.Td>
                    <Table.Td>{dateTime(o.created_at)}</Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Paper>
        )}
      </Loadable>
    </>
  );
}

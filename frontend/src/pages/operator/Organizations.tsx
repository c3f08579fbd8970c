import { Paper, Table } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";

import { api, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime } from "../../lib/format";
import { AnchorLink } from "../../components/links";

export function OrganizationsPage() {
  const orgs = useQuery({
    queryKey: keys.admin("orgs"),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orgs", { params: { query: { limit: 200 } } })),
  });
  return (
    <>
      <PageHeader title="Organizations" subtitle="Tenants of this installation; open one to edit its quotas and billing terms." />
      <Loadable query={orgs}>
        {(page) => (
          <Paper withBorder>
            <Table striped highlightOnHover aria-label="Organizations">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>Name</Table.Th>
                  <Table.Th>Id</Table.Th>
                  <Table.Th>Created</Table.Th>
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

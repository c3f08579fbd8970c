import { Button, Group, NumberInput, Paper, Stack, Table, TextInput, Title } from "@mantine/core";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useOrgNames } from "../../api/queries";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { words } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { isMonth, SlaReportView, thisMonth } from "../tenant/Sla";
import { t } from "../../i18n";

export function AdminSlaPage() {
  const [month, setMonth] = useState(thisMonth());
  const valid = isMonth(month);
  const names = useOrgNames().data ?? new Map<string, string>();
  const reports = useQuery({
    queryKey: keys.admin("sla", month),
    queryFn: () => unwrap(api.GET("/api/v1/admin/sla", { params: { query: { month } } })),
    enabled: valid,
  });
  return (
    <>
      <PageHeader
        title={t("adminSla.title")}
        subtitle={t("adminSla.subtitle")}
        actions={<TextInput label={t("adminSla.month")} type="month" value={month} onChange={(e) => setMonth(e.currentTarget.value)} error={valid ? undefined : t("adminSla.monthFormat")} />}
      />
      <Stack>
        <Policies />
        {valid && (
          <Loadable query={reports}>
            {(list) =>
              list.length === 0 ? (
                <EmptyState title={t("adminSla.noneTitle")} />
              ) : (
                list.map((report) => (
                  <Paper withBorder p="md" key={report.org_id}>
                    <Title order={4} mb="xs">
                      {names.get(report.org_id) ?? report.org_id}
                    </Title>
                    <SlaReportView report={report} />
                  </Paper>
                ))
              )
            }
          </Loadable>
        )}
      </Stack>
    </>
  );
}

function Policies() {
  const queryClient = useQueryClient();
  const policies = useQuery({
    queryKey: keys.admin("sla-policies"),
    queryFn: () => unwrap(api.GET("/api/v1/admin/sla/policies")),
  });
  const [draft, setRows] = useState<Schemas["SlaPolicy"][] | null>(null);
  const rows = draft ?? policies.data ?? null;
  const save = useMutation({
    mutationFn: (list: Schemas["SlaPolicy"][]) => unwrap(api.PUT("/api/v1/admin/sla/policies", { body: { policies: list } })),
    onSuccess: (saved) => {
      notifySuccess(t("adminSla.saved"));
      setRows(null);
      queryClient.setQueryData(keys.admin("sla-policies"), saved);
    },
  });
  const update = (index: number, patch: Partial<Schemas["SlaPolicy"]>) =>
    setRows(rows?.map((p, i) => (i === index ? { ...p, ...patch } : p)) ?? null);
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("adminSla.policies")}
      </Title>
      <Loadable query={policies}>
        {() => (
          <>
            <Table aria-label={t("adminSla.policiesAria")}>
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t("adminSla.class")}</Table.Th>
                  <Table.Th>{t("adminSla.target")}</Table.Th>
                  <Table.Th>{t("adminSla.startWithin")}</Table.Th>
                  <Table.Th>{t("adminSla.tiers")}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {(rows ?? []).map((p, index) => (
                  <Table.Tr key={p.priority_class}>
                    <Table.Td>{words(p.priority_class)}</Table.Td>
                    <Table.Td>
                      <NumberInput
                        aria-label={t("adminSla.targetOf", { class: words(p.priority_class) })}
                        size="xs"
                        min={0}
                        max={100}
                        decimalScale={2}
                        value={p.availability_target_permyriad / 100}
                        onChange={(v) => update(index, { availability_target_permyriad: Math.round(Number(v) * 100) })}
                      />
                    </Table.Td>
                    <Table.Td>
                      <NumberInput
                        aria-label={t("adminSla.waitOf", { class: words(p.priority_class) })}
                        size="xs"
                        min={0}
                        allowDecimal={false}
                        value={p.queue_wait_target_seconds ?? ""}
                        onChange={(v) => update(index, { queue_wait_target_seconds: typeof v === "number" ? v : null })}
                      />
                    </Table.Td>
                    <Table.Td>
                      {p.credit_tiers.map((tier) => t("adminSla.tier", { credit: tier.credit_percent, below: tier.below_permyriad / 100 })).join(" · ") || t("common.none")}
                    </Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
            {save.isError && <ProblemAlert error={save.error} title={t("adminSla.failed")} />}
            <Group mt="sm">
              <Button onClick={() => rows && save.mutate(rows)} loading={save.isPending} disabled={!rows}>
                {t("adminSla.save")}
              </Button>
            </Group>
          </>
        )}
      </Loadable>
    </Paper>
  );
}

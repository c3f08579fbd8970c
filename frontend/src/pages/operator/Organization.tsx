import { ActionIcon, Button, Checkbox, Grid, Group, NumberInput, Paper, Select, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useParams } from "@tanstack/react-router";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useGpuModelNames, useOrgNames, useRegions, useSpend } from "../../api/queries";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { money, number } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { AnchorLink, ButtonLink } from "../../components/links";
import { OrgInvoices } from "./OrgInvoices";
import { t } from "../../i18n";

type Row = Schemas["QuotaSpec"] & { used_gpus?: number };

export function OrganizationPage() {
  const { orgId } = useParams({ strict: false }) as { orgId: string };
  const name = useOrgNames().data?.get(orgId);
  return (
    <>
      <PageHeader
        title={name ?? t("organization.fallbackTitle")}
        subtitle={
          <AnchorLink to="/admin/orgs" size="sm">
            {t("organization.all")}
          </AnchorLink>
        }
        actions={
          <ButtonLink to="/orgs/$orgId" params={{ orgId }} variant="light">
            {t("organization.viewAsTenant")}
          </ButtonLink>
        }
      />
      <Grid>
        <Grid.Col span={{ base: 12, xl: 8 }}>
          <Stack>
            <Quotas orgId={orgId} />
            <OrgInvoices orgId={orgId} />
          </Stack>
        </Grid.Col>
        <Grid.Col span={{ base: 12, xl: 4 }}>
          <Stack>
            <Billing orgId={orgId} />
            <WaitingLimit orgId={orgId} />
            <Networks orgId={orgId} />
          </Stack>
        </Grid.Col>
      </Grid>
    </>
  );
}

function Quotas({ orgId }: { orgId: string }) {
  const queryClient = useQueryClient();
  const quotas = useQuery({
    queryKey: keys.admin("quotas", orgId),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orgs/{org_id}/quotas", { params: { path: { org_id: orgId } } })),
  });
  const models = useGpuModelNames();
  const regions = useRegions();
  // Edits stay a draft until saved; before the first edit the server's rows show.
  const [draft, setRows] = useState<Row[] | null>(null);
  const rows: Row[] | null = draft ?? quotas.data ?? null;

  const save = useMutation({
    mutationFn: (quotasToSet: Row[]) =>
      unwrap(
        api.PUT("/api/v1/admin/orgs/{org_id}/quotas", {
          params: { path: { org_id: orgId } },
          body: {
            quotas: quotasToSet.map((q) => ({
              gpu_model: q.gpu_model,
              region: q.region || null,
              project_id: q.project_id || null,
              guaranteed_gpus: q.guaranteed_gpus,
              max_gpus: q.max_gpus ?? null,
            })),
          },
        }),
      ),
    onSuccess: (saved) => {
      notifySuccess(t("organization.quotasSaved"));
      setRows(null);
      queryClient.setQueryData(keys.admin("quotas", orgId), saved);
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId) });
    },
  });

  const update = (index: number, patch: Partial<Row>) =>
    setRows(rows?.map((row, i) => (i === index ? { ...row, ...patch } : row)) ?? null);

  return (
    <Paper withBorder p="md">
      <Title order={4} mb="xs">
        {t("organization.quotas")}
      </Title>
      <Text size="sm" c="dimmed" mb="sm">
        {t("organization.quotasHelp")}
      </Text>
      <Loadable query={quotas}>
        {() => (
          <Stack>
            <Table.ScrollContainer minWidth={700}>
              <Table aria-label={t("organization.quotas")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("organization.gpuModel")}</Table.Th>
                    <Table.Th>{t("organization.region")}</Table.Th>
                    <Table.Th>{t("organization.guaranteed")}</Table.Th>
                    <Table.Th>{t("organization.maximum")}</Table.Th>
                    <Table.Th>{t("organization.inUse")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {(rows ?? []).map((row, index) => (
                    <Table.Tr key={index}>
                      <Table.Td>
                        <Select
                          aria-label={t("organization.modelOf", { n: index + 1 })}
                          size="xs"
                          miw={190}
                          data={models.data ?? [row.gpu_model]}
                          value={row.gpu_model}
                          allowDeselect={false}
                          onChange={(v) => v && update(index, { gpu_model: v })}
                        />
                      </Table.Td>
                      <Table.Td>
                        <Select
                          aria-label={t("organization.regionOf", { n: index + 1 })}
                          size="xs"
                          data={[{ value: "", label: t("organization.allRegions") }, ...(regions.data ?? []).map((r) => ({ value: r.name, label: r.name }))]}
                          value={row.region ?? ""}
                          allowDeselect={false}
                          onChange={(v) => update(index, { region: v || null })}
                        />
                      </Table.Td>
                      <Table.Td>
                        <NumberInput
                          aria-label={t("organization.guaranteedOf", { model: row.gpu_model })}
                          size="xs"
                          min={0}
                          allowDecimal={false}
                          value={row.guaranteed_gpus}
                          onChange={(v) => update(index, { guaranteed_gpus: typeof v === "number" ? v : 0 })}
                        />
                      </Table.Td>
                      <Table.Td>
                        <NumberInput
                          aria-label={t("organization.maximumOf", { model: row.gpu_model })}
                          size="xs"
                          min={0}
                          allowDecimal={false}
                          value={row.max_gpus ?? ""}
                          onChange={(v) => update(index, { max_gpus: typeof v === "number" ? v : null })}
                        />
                      </Table.Td>
                      <Table.Td>{row.used_gpus ?? "—"}</Table.Td>
                      <Table.Td>
                        <ActionIcon
                          variant="subtle"
                          color="red"
                          aria-label={t("organization.removeQuota", { n: index + 1 })}
                          onClick={() => setRows(rows?.filter((_, i) => i !== index) ?? null)}
                        >
                          ×
                        </ActionIcon>
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
            {save.isError && <ProblemAlert error={save.error} title={t("organization.quotasFailed")} />}
            <Group>
              <Button
                variant="default"
                onClick={() =>
                  setRows([
                    ...(rows ?? []),
                    { gpu_model: models.data?.[0] ?? "", region: null, project_id: null, guaranteed_gpus: 0, max_gpus: null },
                  ])
                }
              >
                {t("organization.addQuota")}
              </Button>
              <Button onClick={() => rows && save.mutate(rows)} loading={save.isPending} disabled={rows === null}>
                {t("organization.saveQuotas")}
              </Button>
            </Group>
          </Stack>
        )}
      </Loadable>
    </Paper>
  );
}

/** The organization's private networks and the addresses in use on them. */
function Networks({ orgId }: { orgId: string }) {
  const networks = useQuery({
    queryKey: keys.admin("networks", orgId),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/networks", { params: { path: { org_id: orgId }, query: { limit: 200 } } })),
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="xs">
        {t("organization.networks")}
      </Title>
      <Loadable query={networks}>
        {(data) =>
          data.items.length === 0 ? (
            <Text size="sm" c="dimmed">
              {t("organization.noNetworks")}
            </Text>
          ) : (
            <Stack gap="sm">
              {data.items.map((network) => (
                <Stack key={network.id} gap={4}>
                  <Text size="sm" fw={500}>
                    {network.project_id
                      ? t("organization.projectNetwork", {
                          region: network.region,
                          project: network.project ?? network.project_id,
                          cidr: network.cidr,
                          vni: network.vni,
                        })
                      : t("organization.network", { region: network.region, cidr: network.cidr, vni: network.vni })}
                  </Text>
                  {network.addresses.length === 0 ? (
                    <Text size="xs" c="dimmed">
                      {t("organization.noAddresses")}
                    </Text>
                  ) : (
                    <Table aria-label={t("organization.networkAddresses", { cidr: network.cidr })}>
                      <Table.Tbody>
                        {network.addresses.map((a) => (
                          <Table.Tr key={`${a.address}-${a.order_id}`}>
                            <Table.Td>
                              <Text size="xs" ff="monospace">
                                {a.address}
                              </Text>
                            </Table.Td>
                            <Table.Td>
                              <Text size="xs">{a.order}</Text>
                            </Table.Td>
                            <Table.Td>
                              <Text size="xs">{a.node}</Text>
                            </Table.Td>
                          </Table.Tr>
                        ))}
                      </Table.Tbody>
                    </Table>
                  )}
                </Stack>
              ))}
            </Stack>
          )
        }
      </Loadable>
    </Paper>
  );
}

function WaitingLimit({ orgId }: { orgId: string }) {
  const queryClient = useQueryClient();
  const limits = useQuery({
    queryKey: keys.admin("queue-limits", orgId),
    queryFn: () =>
      unwrap(api.GET("/api/v1/admin/orgs/{org_id}/queue-limits", { params: { path: { org_id: orgId } } })),
  });
  // `undefined` until edited; `null` (an emptied field) means the default.
  const [draft, setDraft] = useState<number | null | undefined>(undefined);
  const save = useMutation({
    mutationFn: (own: number | null) =>
      unwrap(
        api.PUT("/api/v1/admin/orgs/{org_id}/queue-limits", {
          params: { path: { org_id: orgId } },
          body: {
            max_waiting_orders: own,
            projects: (limits.data?.projects ?? []).map((p) => ({
              project_id: p.project_id,
              max_waiting_orders: p.max_waiting_orders,
            })),
          },
        }),
      ),
    onSuccess: (saved) => {
      notifySuccess(t("organization.limitSaved"));
      setDraft(undefined);
      queryClient.setQueryData(keys.admin("queue-limits", orgId), saved);
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="xs">
        {t("organization.waitingOrders")}
      </Title>
      <Loadable query={limits}>
        {(data) => {
          const own = draft === undefined ? (data.default ? null : data.max_waiting_orders) : draft;
          return (
            <Stack gap="xs">
              <Text size="sm">
                {t("organization.waitingOf", { waiting: number(data.waiting_orders), max: number(data.max_waiting_orders) })}
                {data.default ? t("organization.defaultSuffix") : ""}
                {t("organization.moreRefused")}
              </Text>
              <NumberInput
                label={t("organization.ownLimit")}
                description={t("organization.ownLimitHint")}
                min={0}
                max={1000000}
                value={own ?? ""}
                onChange={(value) => setDraft(typeof value === "number" ? value : null)}
              />
              {save.isError && <ProblemAlert error={save.error} title={t("organization.limitFailed")} />}
              <Group>
                <Button onClick={() => save.mutate(own)} loading={save.isPending} disabled={draft === undefined}>
                  {t("organization.saveLimit")}
                </Button>
              </Group>
            </Stack>
          );
        }}
      </Loadable>
    </Paper>
  );
}

function Billing({ orgId }: { orgId: string }) {
  const spend = useSpend(orgId);
  const queryClient = useQueryClient();
  const billing = useQuery({
    queryKey: keys.admin("billing", orgId),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orgs/{org_id}/billing", { params: { path: { org_id: orgId } } })),
  });
  const [draft, setTerms] = useState<Schemas["BillingTerms"] | null>(null);
  const terms = draft ?? billing.data?.terms ?? null;
  const save = useMutation({
    mutationFn: (body: Schemas["BillingTerms"]) =>
      unwrap(api.PUT("/api/v1/admin/orgs/{org_id}/billing", { params: { path: { org_id: orgId } }, body })),
    onSuccess: () => {
      notifySuccess(t("organization.termsSaved"));
      void queryClient.invalidateQueries({ queryKey: keys.admin("billing", orgId) });
    },
    onError: (error) => notifyError(error),
  });
  const [topUp, setTopUp] = useState<{ amount: number | string; reason: string }>({ amount: "", reason: "" });
  const credit = useMutation({
    mutationFn: () =>
      unwrap(
        api.POST("/api/v1/admin/orgs/{org_id}/balance/top-ups", {
          params: { path: { org_id: orgId } },
          body: { amount_micros: Math.round(Number(topUp.amount) * 1_000_000), reason: topUp.reason },
        }),
      ),
    onSuccess: (balance) => {
      notifySuccess(t("organization.balanceNow", { amount: money(balance.balance_micros) }));
      setTopUp({ amount: "", reason: "" });
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("organization.terms")}
      </Title>
      <Loadable query={billing}>
        {(status) => (
          <Stack>
            <Text size="sm">{t("organization.spent", { amount: spend.data ? money(spend.data.total_micros, spend.data.currency) : money(status.month_spend_micros) })}</Text>
            {terms && (
              <>
                <NumberInput
                  label={t("organization.discount")}
                  min={0}
                  max={1000}
                  allowDecimal={false}
                  value={terms.discount_permille}
                  onChange={(v) => setTerms({ ...terms, discount_permille: typeof v === "number" ? v : 0 })}
                />
                <NumberInput
                  label={t("organization.budget")}
                  description={t("organization.budgetHint")}
                  min={0}
                  value={terms.monthly_budget_micros ? terms.monthly_budget_micros / 1_000_000 : ""}
                  onChange={(v) => setTerms({ ...terms, monthly_budget_micros: typeof v === "number" ? Math.round(v * 1_000_000) : null })}
                />
                <Checkbox
                  label={t("organization.hardCap")}
                  checked={terms.hard_cap ?? false}
                  onChange={(e) => setTerms({ ...terms, hard_cap: e.currentTarget.checked })}
                />
                <Checkbox
                  label={t("organization.prepaid")}
                  checked={terms.prepaid ?? false}
                  onChange={(e) => setTerms({ ...terms, prepaid: e.currentTarget.checked })}
                />
                <Button onClick={() => save.mutate(terms)} loading={save.isPending}>
                  {t("organization.saveTerms")}
                </Button>
              </>
            )}
            {terms?.prepaid && (
              <Group align="flex-end">
                <NumberInput label={t("organization.topUp")} min={0} value={topUp.amount} onChange={(v) => setTopUp({ ...topUp, amount: v })} w={120} />
                <TextInput label={t("organization.reason")} value={topUp.reason} onChange={(e) => setTopUp({ ...topUp, reason: e.currentTarget.value })} style={{ flex: 1 }} />
                <Button onClick={() => credit.mutate()} loading={credit.isPending} disabled={!topUp.amount || !topUp.reason.trim()}>
                  {t("organization.credit")}
                </Button>
              </Group>
            )}
          </Stack>
        )}
      </Loadable>
    </Paper>
  );
}

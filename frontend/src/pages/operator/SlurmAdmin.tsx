import { Button, Paper, Select, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useGpuModelNames, useRegions } from "../../api/queries";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { dateTime, number } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { t } from "../../i18n";

const ACCESS: Schemas["SlurmAccess"][] = ["srun", "ssh"];
const USERS: Schemas["SlurmUsers"][] = ["per_organization", "shared"];
/** The start of a Unix user name. */
const USER_PREFIX = /^[a-z_][a-z0-9_-]{0,15}$/;
const slurmKey = keys.admin("slurm-clusters");
/** Slurm's names: what `sbatch` takes as a partition, account or GRES type. */
const SLURM_NAME = /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$/;

function useSlurmClusters() {
  return useQuery({
    queryKey: slurmKey,
    queryFn: () => unwrap(api.GET("/api/v1/admin/slurm-clusters")),
    refetchInterval: 10_000,
  });
}

function outside(cluster: Schemas["SlurmCluster"]): string {
  const held = Object.values(cluster.outside_gpus).reduce((sum, gpus) => sum + gpus, 0);
  return number(held);
}

/** The Unix user each organization's jobs run as on a region's cluster: whom the operator makes on every node. */
function UnixUsers({ region }: { region: string }) {
  const users = useQuery({
    queryKey: [...slurmKey, region, "users"],
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/admin/slurm-clusters/{region}/users", {
          params: { path: { region }, query: { limit: 200 } },
        }),
      ),
  });
  return (
    <Loadable query={users}>
      {(page) => (
        <Stack gap={4} p="sm">
          <Text size="sm">{t("slurm.unixUsersHint")}</Text>
          <Table aria-label={t("slurm.unixUsersOf", { region })}>
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t("slurm.organization")}</Table.Th>
                <Table.Th>{t("slurm.unixUser")}</Table.Th>
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {page.items.map((u) => (
                <Table.Tr key={u.org_id}>
                  <Table.Td>{u.organization}</Table.Td>
                  <Table.Td ff="monospace">{u.user}</Table.Td>
                </Table.Tr>
              ))}
            </Table.Tbody>
          </Table>
          {page.next_cursor && (
            <Text c="dimmed" size="sm">
              {t("slurm.unixUsersMore")}
            </Text>
          )}
        </Stack>
      )}
    </Loadable>
  );
}

/** Each Slurm region's cluster: its nodes, Gantry's jobs in it, and what others hold. */
export function SlurmClusters() {
  const list = useSlurmClusters();
  const [shown, setShown] = useState<string | null>(null);
  return (
    <Loadable query={list}>
      {(clusters) =>
        clusters.length === 0 ? (
          <Text c="dimmed" size="sm">
            {t("slurm.none")}
          </Text>
        ) : (
          <Paper withBorder>
            <Table.ScrollContainer minWidth={720}>
              <Table striped aria-label={t("slurm.title")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("slurm.region")}</Table.Th>
                    <Table.Th>{t("slurm.partition")}</Table.Th>
                    <Table.Th>{t("slurm.gres")}</Table.Th>
                    <Table.Th>{t("slurm.users")}</Table.Th>
                    <Table.Th ta="right">{t("slurm.nodes")}</Table.Th>
                    <Table.Th ta="right">{t("slurm.jobs")}</Table.Th>
                    <Table.Th ta="right">{t("slurm.outside")}</Table.Th>
                    <Table.Th>{t("slurm.synced")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {clusters.map((c) => (
                    <Table.Tr key={c.region}>
                      <Table.Td>{c.region}</Table.Td>
                      <Table.Td ff="monospace">
                        {c.partition}
                        {c.account ? ` (${c.account})` : ""}
                      </Table.Td>
                      <Table.Td ff="monospace">
                        {Object.entries(c.gres_types)
                          .map(([model, gres]) => `${model} → ${gres}`)
                          .join(", ")}
                      </Table.Td>
                      <Table.Td>
                        {c.users === "per_organization" ? (
                          <>
                            {t("slurm.perOrganization", { prefix: c.user_prefix })}{" "}
                            <Button
                              variant="subtle"
                              size="compact-xs"
                              aria-expanded={shown === c.region}
                              onClick={() => setShown(shown === c.region ? null : c.region)}
                            >
                              {t("slurm.unixUsers")}
                            </Button>
                          </>
                        ) : (
                          t("slurm.shared")
                        )}
                      </Table.Td>
                      <Table.Td ta="right">{number(c.nodes)}</Table.Td>
                      <Table.Td ta="right">{number(c.jobs)}</Table.Td>
                      <Table.Td ta="right">{outside(c)}</Table.Td>
                      <Table.Td>
                        {c.problem ? (
                          <Text c="red" size="sm">
                            {c.problem}
                          </Text>
                        ) : (
                          dateTime(c.synced_at)
                        )}
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
            {shown && clusters.some((c) => c.region === shown) && <UnixUsers region={shown} />}
          </Paper>
        )
      }
    </Loadable>
  );
}

/** Declares (or changes) the Slurm cluster that runs a region. */
export function DeclareSlurmCluster() {
  const queryClient = useQueryClient();
  const regions = useRegions();
  const models = useGpuModelNames();
  const form = useForm({
    initialValues: {
      region: "",
      partition: "",
      account: "",
      conf_path: "",
      login_host: "",
      output_dir: "",
      model: "",
      gres: "",
      access: "srun" as Schemas["SlurmAccess"],
      users: "per_organization" as Schemas["SlurmUsers"],
      user_prefix: "gantry-",
    },
    validate: {
      region: (v) => (v ? null : t("slurm.regionRequired")),
      partition: (v) => (SLURM_NAME.test(v) ? null : t("slurm.nameFormat")),
      account: (v) => (v === "" || SLURM_NAME.test(v) ? null : t("slurm.nameFormat")),
      gres: (v) => (SLURM_NAME.test(v) ? null : t("slurm.nameFormat")),
      model: (v) => (v ? null : t("slurm.modelRequired")),
      output_dir: (v) => (v.startsWith("/") && v.length > 1 ? null : t("slurm.pathFormat")),
      conf_path: (v) => (v === "" || v.startsWith("/") ? null : t("slurm.pathFormat")),
      user_prefix: (v) => (USER_PREFIX.test(v) ? null : t("slurm.userPrefixFormat")),
    },
  });
  const declare = useMutation({
    mutationFn: ({ model, gres, account, conf_path, login_host, ...rest }: typeof form.values) =>
      unwrap(
        api.PUT("/api/v1/admin/slurm-clusters", {
          body: {
            ...rest,
            gres_types: { [model]: gres },
            ...(account ? { account } : {}),
            ...(conf_path ? { conf_path } : {}),
            ...(login_host ? { login_host } : {}),
          },
        }),
      ),
    onSuccess: (cluster) => {
      notifySuccess(t("slurm.declared", { region: cluster.region }));
      form.reset();
      void queryClient.invalidateQueries({ queryKey: slurmKey });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("slurm.declare")}
      </Title>
      <form onSubmit={form.onSubmit((v) => declare.mutate(v))} noValidate>
        <Stack gap="xs">
          <Select
            label={t("slurm.region")}
            data={(regions.data ?? []).map((r) => r.name)}
            required
            {...form.getInputProps("region")}
          />
          <TextInput label={t("slurm.partition")} placeholder={t("slurm.partitionExample")} required {...form.getInputProps("partition")} />
          <TextInput label={t("slurm.account")} {...form.getInputProps("account")} />
          <Select label={t("slurm.model")} data={models.data ?? []} required {...form.getInputProps("model")} />
          <TextInput label={t("slurm.gresType")} placeholder={t("slurm.gresExample")} required {...form.getInputProps("gres")} />
          <TextInput
            label={t("slurm.outputDir")}
            description={t("slurm.outputDirHint")}
            placeholder={t("slurm.outputDirExample")}
            required
            {...form.getInputProps("output_dir")}
          />
          <TextInput label={t("slurm.confPath")} placeholder={t("slurm.confPathExample")} {...form.getInputProps("conf_path")} />
          <TextInput
            label={t("slurm.loginHost")}
            description={t("slurm.loginHostHint")}
            placeholder={t("slurm.loginHostExample")}
            {...form.getInputProps("login_host")}
          />
          <Select label={t("slurm.access")} data={ACCESS} allowDeselect={false} {...form.getInputProps("access")} />
          <Select
            label={t("slurm.users")}
            description={t("slurm.usersHint")}
            data={USERS.map((value) => ({ value, label: value === "per_organization" ? t("slurm.usersOwn") : t("slurm.shared") }))}
            allowDeselect={false}
            {...form.getInputProps("users")}
          />
          {form.values.users === "per_organization" && (
            <TextInput label={t("slurm.userPrefix")} required {...form.getInputProps("user_prefix")} />
          )}
          {declare.isError && <ProblemAlert error={declare.error} title={t("slurm.refused")} />}
          <Button type="submit" loading={declare.isPending}>
            {t("slurm.save")}
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

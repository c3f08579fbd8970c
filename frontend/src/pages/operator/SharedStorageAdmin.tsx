import { Button, NumberInput, Paper, Select, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useRegions } from "../../api/queries";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { gib, number } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { t } from "../../i18n";

const KINDS: Schemas["SharedFsKind"][] = ["glusterfs", "nfs", "cephfs", "lustre", "weka"];
const sharedKey = keys.admin("shared-file-systems");

function useSharedFileSystems() {
  return useQuery({
    queryKey: sharedKey,
    queryFn: () => unwrap(api.GET("/api/v1/admin/shared-file-systems")),
  });
}

/** Each region's shared file system, with the shared volumes on it. */
export function SharedFileSystems() {
  const list = useSharedFileSystems();
  return (
    <Loadable query={list}>
      {(systems) =>
        systems.length === 0 ? (
          <Text c="dimmed" size="sm">
            {t("sharedFs.none")}
          </Text>
        ) : (
          <Paper withBorder>
            <Table.ScrollContainer minWidth={720}>
              <Table striped aria-label={t("sharedFs.title")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("sharedFs.region")}</Table.Th>
                    <Table.Th>{t("sharedFs.kind")}</Table.Th>
                    <Table.Th>{t("sharedFs.mountPath")}</Table.Th>
                    <Table.Th ta="right">{t("sharedFs.volumes")}</Table.Th>
                    <Table.Th ta="right">{t("sharedFs.provisioned")}</Table.Th>
                    <Table.Th ta="right">{t("sharedFs.used")}</Table.Th>
                    <Table.Th ta="right">{t("sharedFs.free")}</Table.Th>
                    <Table.Th ta="right">{t("sharedFs.organizations")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {systems.map((fs) => (
                    <Table.Tr key={fs.region}>
                      <Table.Td>{fs.region}</Table.Td>
                      <Table.Td>{fs.kind}</Table.Td>
                      <Table.Td ff="monospace">{fs.mount_path}</Table.Td>
                      <Table.Td ta="right">{number(fs.volumes)}</Table.Td>
                      <Table.Td ta="right">{t("sharedFs.gib", { gib: number(fs.provisioned_gib) })}</Table.Td>
                      <Table.Td ta="right">{t("sharedFs.gib", { gib: gib(fs.used_bytes) })}</Table.Td>
                      <Table.Td ta="right">{fs.free_bytes == null ? "—" : t("sharedFs.gib", { gib: gib(fs.free_bytes) })}</Table.Td>
                      <Table.Td ta="right">
                        {t("sharedFs.ranges", { used: number(fs.organizations), left: number(fs.ranges_left), first: fs.first_id })}
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          </Paper>
        )
      }
    </Loadable>
  );
}

/** Declares (or changes) the shared file system of a region. */
export function DeclareSharedFileSystem() {
  const queryClient = useQueryClient();
  const regions = useRegions();
  const form = useForm({
    initialValues: { region: "", kind: "glusterfs" as Schemas["SharedFsKind"], mount_path: "", first_id: "" as number | string },
    validate: {
      region: (v) => (v ? null : t("sharedFs.regionRequired")),
      mount_path: (v) => (v.startsWith("/") && v.length > 1 ? null : t("sharedFs.mountPathFormat")),
    },
  });
  const declare = useMutation({
    mutationFn: ({ first_id, ...rest }: typeof form.values) =>
      unwrap(
        api.PUT("/api/v1/admin/shared-file-systems", {
          body: { ...rest, ...(first_id === "" ? {} : { first_id: Number(first_id) }) },
        }),
      ),
    onSuccess: (fs) => {
      notifySuccess(t("sharedFs.declared", { region: fs.region }));
      form.reset();
      void queryClient.invalidateQueries({ queryKey: sharedKey });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("sharedFs.declare")}
      </Title>
      <form onSubmit={form.onSubmit((v) => declare.mutate(v))} noValidate>
        <Stack gap="xs">
          <Select
            label={t("sharedFs.region")}
            data={(regions.data ?? []).map((r) => r.name)}
            required
            {...form.getInputProps("region")}
          />
          <Select label={t("sharedFs.kind")} data={KINDS} allowDeselect={false} {...form.getInputProps("kind")} />
          <TextInput
            label={t("sharedFs.mountPath")}
            description={t("sharedFs.mountPathHint")}
            placeholder={t("sharedFs.mountPathExample")}
            required
            {...form.getInputProps("mount_path")}
          />
          <NumberInput
            label={t("sharedFs.firstId")}
            description={t("sharedFs.firstIdHint")}
            min={65_536}
            allowDecimal={false}
            {...form.getInputProps("first_id")}
          />
          {declare.isError && <ProblemAlert error={declare.error} title={t("sharedFs.refused")} />}
          <Button type="submit" loading={declare.isPending}>
            {t("sharedFs.save")}
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

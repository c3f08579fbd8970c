import { Button, Code, Group, Paper, PasswordInput, Stack, Table, Text, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "../../api/client";
import { keys, useImagePolicy, useRegistryCredentials } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { dateTime } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useOrgId } from "../../lib/orgId";
import { t } from "../../i18n";

type Values = { registry: string; username: string; password: string };

/** The organization's logins to private registries, for its nodes' pulls of its images. */
export function RegistryCredentials() {
  const orgId = useOrgId();
  const queryClient = useQueryClient();
  const credentials = useRegistryCredentials(orgId);
  const policy = useImagePolicy();
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "registry-credentials") });
  const form = useForm<Values>({
    initialValues: { registry: "", username: "", password: "" },
    validate: {
      registry: (v) => (/^[A-Za-z0-9.-]+(:\d+)?$/.test(v.trim()) ? null : t("registries.registryFormat")),
      username: (v) => (v.trim() ? null : t("registries.usernameRequired")),
      password: (v) => (v ? null : t("registries.passwordRequired")),
    },
  });
  const add = useMutation({
    mutationFn: (body: Values) =>
      unwrap(api.POST("/api/v1/orgs/{org_id}/registry-credentials", { params: { path: { org_id: orgId } }, body })),
    onSuccess: (stored) => {
      notifySuccess(t("registries.added", { registry: stored.registry }));
      form.reset();
      refresh();
    },
    onError: (error) => {
      if (error instanceof ApiError) {
        for (const f of error.fieldErrors) {
          if (f.field === "registry" || f.field === "username" || f.field === "password") form.setFieldError(f.field, f.message);
        }
      }
    },
  });
  const remove = useMutation({
    mutationFn: (id: string) =>
      unwrap(
        api.DELETE("/api/v1/orgs/{org_id}/registry-credentials/{credential_id}", {
          params: { path: { org_id: orgId, credential_id: id } },
        }),
      ),
    onSuccess: () => {
      notifySuccess(t("registries.deleted"));
      refresh();
    },
    onError: (error) => notifyError(error),
  });
  const allowed = policy.data ?? [];

  return (
    <Stack>
      <Text size="sm" c="dimmed">
        {t("registries.intro")}{" "}
        {allowed.length ? t("registries.allowed", { prefixes: allowed.join(", ") }) : t("registries.noneAllowed")}
      </Text>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => add.mutate({ ...v, registry: v.registry.trim(), username: v.username.trim() }))} noValidate>
          <Stack>
            <Group grow align="flex-start">
              <TextInput
                label={t("registries.registry")}
                description={t("registries.registryHint")}
                placeholder={t("registries.registryExample")}
                required
                {...form.getInputProps("registry")}
              />
              <TextInput label={t("registries.username")} required autoComplete="off" {...form.getInputProps("username")} />
              <PasswordInput
                label={t("registries.password")}
                description={t("registries.passwordHint")}
                required
                autoComplete="new-password"
                {...form.getInputProps("password")}
              />
            </Group>
            <Group>
              <Button type="submit" loading={add.isPending}>
                {t("registries.add")}
              </Button>
            </Group>
            {add.isError && !(add.error instanceof ApiError && add.error.fieldErrors.length) && (
              <ProblemAlert error={add.error} title={t("registries.addFailed")} />
            )}
          </Stack>
        </form>
      </Paper>
      <Loadable query={credentials}>
        {(data) =>
          data.length === 0 ? (
            <EmptyState title={t("registries.emptyTitle")}>{t("registries.emptyBody")}</EmptyState>
          ) : (
            <Paper withBorder>
              <Table aria-label={t("registries.tableAria")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("registries.registry")}</Table.Th>
                    <Table.Th>{t("registries.username")}</Table.Th>
                    <Table.Th>{t("registries.addedAt")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.map((credential) => (
                    <Table.Tr key={credential.id}>
                      <Table.Td>
                        <Code>{credential.registry}</Code>
                      </Table.Td>
                      <Table.Td>{credential.username}</Table.Td>
                      <Table.Td>{dateTime(credential.created_at)}</Table.Td>
                      <Table.Td>
                        <ConfirmButton
                          size="xs"
                          label={t("registries.delete")}
                          title={t("registries.deleteTitle", { registry: credential.registry })}
                          message={t("registries.deleteBody")}
                          confirmLabel={t("registries.delete")}
                          onConfirm={() => remove.mutate(credential.id)}
                        />
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Paper>
          )
        }
      </Loadable>
    </Stack>
  );
}

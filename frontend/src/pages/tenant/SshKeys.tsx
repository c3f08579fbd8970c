import { Button, Code, Group, Paper, Stack, Table, Text, Textarea, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../../api/client";
import { keys, useSshKeys } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { dateTime } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { t } from "../../i18n";

/** The signed-in user's SSH public keys, which their instances admit. */
export function SshKeys() {
  const queryClient = useQueryClient();
  const sshKeys = useSshKeys();
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.sshKeys });
  const form = useForm({
    initialValues: { name: "", public_key: "" },
    validate: {
      name: (v) => (v.trim() ? null : t("sshKeys.nameRequired")),
      public_key: (v) => (/^(ssh-|ecdsa-|sk-)/.test(v.trim()) ? null : t("sshKeys.publicKeyFormat")),
    },
  });
  const add = useMutation({
    mutationFn: (body: { name: string; public_key: string }) => unwrap(api.POST("/api/v1/me/ssh-keys", { body })),
    onSuccess: (key) => {
      notifySuccess(t("sshKeys.added", { name: key.name }));
      form.reset();
      refresh();
    },
  });
  const remove = useMutation({
    mutationFn: (keyId: string) =>
      unwrap(api.DELETE("/api/v1/me/ssh-keys/{key_id}", { params: { path: { key_id: keyId } } })),
    onSuccess: () => {
      notifySuccess(t("sshKeys.deleted"));
      refresh();
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => add.mutate(v))} noValidate>
          <Stack>
            <TextInput label={t("sshKeys.keyName")} placeholder={t("sshKeys.keyNameExample")} required {...form.getInputProps("name")} />
            <Textarea
              label={t("sshKeys.publicKey")}
              description={t("sshKeys.publicKeyHint")}
              placeholder={t("sshKeys.publicKeyExample")}
              autosize
              minRows={2}
              required
              {...form.getInputProps("public_key")}
            />
            <Group>
              <Button type="submit" loading={add.isPending}>
                {t("sshKeys.add")}
              </Button>
            </Group>
            {add.isError && <ProblemAlert error={add.error} title={t("sshKeys.addFailed")} />}
          </Stack>
        </form>
      </Paper>
      <Loadable query={sshKeys}>
        {(data) =>
          data.length === 0 ? (
            <EmptyState title={t("sshKeys.emptyTitle")}>{t("sshKeys.emptyBody")}</EmptyState>
          ) : (
            <Paper withBorder>
              <Table aria-label={t("sshKeys.tableAria")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("sshKeys.name")}</Table.Th>
                    <Table.Th>{t("sshKeys.fingerprint")}</Table.Th>
                    <Table.Th>{t("sshKeys.addedAt")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.map((key) => (
                    <Table.Tr key={key.id}>
                      <Table.Td>{key.name}</Table.Td>
                      <Table.Td>
                        <Code>{key.fingerprint}</Code>
                        <Text size="xs" c="dimmed">
                          {key.algorithm}
                        </Text>
                      </Table.Td>
                      <Table.Td>{dateTime(key.created_at)}</Table.Td>
                      <Table.Td>
                        <ConfirmButton
                          size="xs"
                          label={t("sshKeys.delete")}
                          title={t("sshKeys.deleteTitle", { name: key.name })}
                          message={t("sshKeys.deleteBody")}
                          confirmLabel={t("sshKeys.delete")}
                          onConfirm={() => remove.mutate(key.id)}
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

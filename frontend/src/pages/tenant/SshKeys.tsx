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

/** The signed-in user's SSH public keys, which their instances admit. */
export function SshKeys() {
  const queryClient = useQueryClient();
  const sshKeys = useSshKeys();
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.sshKeys });
  const form = useForm({
    initialValues: { name: "", public_key: "" },
    validate: {
      name: (v) => (v.trim() ? null : "Name the key after the machine it lives on"),
      public_key: (v) => (/^(ssh-|ecdsa-|sk-)/.test(v.trim()) ? null : "Paste one line of ~/.ssh/id_ed25519.pub"),
    },
  });
  const add = useMutation({
    mutationFn: (body: { name: string; public_key: string }) => unwrap(api.POST("/api/v1/me/ssh-keys", { body })),
    onSuccess: (key) => {
      notifySuccess(`Added the key ${key.name}.`);
      form.reset();
      refresh();
    },
  });
  const remove = useMutation({
    mutationFn: (keyId: string) =>
      unwrap(api.DELETE("/api/v1/me/ssh-keys/{key_id}", { params: { path: { key_id: keyId } } })),
    onSuccess: () => {
      notifySuccess("The key is deleted; running instances stop admitting it.");
      refresh();
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => add.mutate(v))} noValidate>
          <Stack>
            <TextInput label="Key name" placeholder="laptop" required {...form.getInputProps("name")} />
            <Textarea
              label="Public key"
              description="ed25519, ECDSA, or RSA of 2048 bits or more, as in ~/.ssh/id_ed25519.pub"
              placeholder="ssh-ed25519 AAAA… you@laptop"
              autosize
              minRows={2}
              required
              {...form.getInputProps("public_key")}
            />
            <Group>
              <Button type="submit" loading={add.isPending}>
                Add key
              </Button>
            </Group>
            {add.isError && <ProblemAlert error={add.error} title="Could not add the key" />}
          </Stack>
        </form>
      </Paper>
      <Loadable query={sshKeys}>
        {(data) =>
          data.length === 0 ? (
            <EmptyState title="No SSH keys yet">Instances you order admit your keys; add one to reach them.</EmptyState>
          ) : (
            <Paper withBorder>
              <Table aria-label="SSH keys">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>Name</Table.Th>
                    <Table.Th>Fingerprint</Table.Th>
                    <Table.Th>Added</Table.Th>
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
                          label="Delete"
                          title={`Delete ${key.name}?`}
                          message="Running instances stop admitting this key within seconds."
                          confirmLabel="Delete"
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

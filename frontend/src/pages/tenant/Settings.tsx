import { Alert, Button, Code, CopyButton, Group, Modal, Paper, Select, Stack, Table, Tabs, Text, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useMe } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useOrgId } from "../../lib/orgId";
import { SshKeys } from "./SshKeys";

const ROLES: Schemas["OrgRole"][] = ["owner", "admin", "member", "viewer", "billing"];
const ROLE_HELP = "owner: everything · admin: members, keys, orders · member: orders · viewer: read · billing: invoices";

export function SettingsPage() {
  return (
    <>
      <PageHeader title="Members & API keys" subtitle={ROLE_HELP} />
      <Tabs defaultValue="members">
        <Tabs.List mb="md">
          <Tabs.Tab value="members">Members</Tabs.Tab>
          <Tabs.Tab value="keys">API keys</Tabs.Tab>
          <Tabs.Tab value="ssh">SSH keys</Tabs.Tab>
        </Tabs.List>
        <Tabs.Panel value="members">
          <Members />
        </Tabs.Panel>
        <Tabs.Panel value="keys">
          <ApiKeys />
        </Tabs.Panel>
        <Tabs.Panel value="ssh">
          <SshKeys />
        </Tabs.Panel>
      </Tabs>
    </>
  );
}

function Members() {
  const orgId = useOrgId();
  const me = useMe();
  const queryClient = useQueryClient();
  const members = useQuery({
    queryKey: keys.org(orgId, "members"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/members", { params: { path: { org_id: orgId }, query: { limit: 200 } } })),
  });
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "members") });
  const form = useForm({
    initialValues: { email: "", role: "member" as Schemas["OrgRole"] },
    validate: { email: (v) => (/^\S+@\S+$/.test(v) ? null : "Enter the email of a registered user") },
  });
  const add = useMutation({
    mutationFn: (body: { email: string; role: Schemas["OrgRole"] }) =>
      unwrap(api.POST("/api/v1/orgs/{org_id}/members", { params: { path: { org_id: orgId } }, body })),
    onSuccess: (member) => {
      notifySuccess(`${member.email} joined as ${member.role}.`);
      form.reset();
      refresh();
    },
  });
  const change = useMutation({
    mutationFn: ({ userId, role }: { userId: string; role: Schemas["OrgRole"] }) =>
      unwrap(
        api.PATCH("/api/v1/orgs/{org_id}/members/{user_id}", {
          params: { path: { org_id: orgId, user_id: userId } },
          body: { role },
        }),
      ),
    onSuccess: refresh,
    onError: (error) => notifyError(error),
  });
  const remove = useMutation({
    mutationFn: (userId: string) =>
      unwrap(api.DELETE("/api/v1/orgs/{org_id}/members/{user_id}", { params: { path: { org_id: orgId, user_id: userId } } })),
    onSuccess: refresh,
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => add.mutate(v))} noValidate>
          <Group align="flex-end">
            <TextInput label="Add a member by email" placeholder="ada@example.com" required style={{ flex: 1 }} {...form.getInputProps("email")} />
            <Select label="Role" data={ROLES} allowDeselect={false} w={140} {...form.getInputProps("role")} />
            <Button type="submit" loading={add.isPending}>
              Add
            </Button>
          </Group>
          {add.isError && (
            <ProblemAlert error={add.error} title="Could not add the member" />
          )}
        </form>
      </Paper>
      <Loadable query={members}>
        {(data) => (
          <Paper withBorder>
            <Table.ScrollContainer minWidth={560}>
              <Table aria-label="Members">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>Name</Table.Th>
                    <Table.Th>Email</Table.Th>
                    <Table.Th>Role</Table.Th>
                    <Table.Th>Joined</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.items.map((m) => (
                    <Table.Tr key={m.user_id}>
                      <Table.Td>{m.name}</Table.Td>
                      <Table.Td>{m.email}</Table.Td>
                      <Table.Td>
                        <Select
                          aria-label={`Role of ${m.email}`}
                          size="xs"
                          w={120}
                          data={ROLES}
                          value={m.role}
                          allowDeselect={false}
                          onChange={(role) => role && change.mutate({ userId: m.user_id, role: role as Schemas["OrgRole"] })}
                        />
                      </Table.Td>
                      <Table.Td>{dateTime(m.joined_at)}</Table.Td>
                      <Table.Td>
                        {m.user_id !== me.data?.user?.id && (
                          <ConfirmButton
                            size="xs"
                            label="Remove"
                            title={`Remove ${m.email}?`}
                            message="They lose access to this organization at once; their orders keep running."
                            confirmLabel="Remove"
                            onConfirm={() => remove.mutate(m.user_id)}
                          />
                        )}
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          </Paper>
        )}
      </Loadable>
    </Stack>
  );
}

function ApiKeys() {
  const orgId = useOrgId();
  const queryClient = useQueryClient();
  const [secret, setSecret] = useState<string | null>(null);
  const apiKeys = useQuery({
    queryKey: keys.org(orgId, "api-keys"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/api-keys", { params: { path: { org_id: orgId }, query: { limit: 200 } } })),
  });
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "api-keys") });
  const form = useForm({
    initialValues: { name: "", role: "member" as Schemas["OrgRole"] },
    validate: { name: (v) => (v.trim() ? null : "Name the key after what uses it") },
  });
  const create = useMutation({
    mutationFn: (body: { name: string; role: Schemas["OrgRole"] }) =>
      unwrap(api.POST("/api/v1/orgs/{org_id}/api-keys", { params: { path: { org_id: orgId } }, body })),
    onSuccess: (key) => {
      setSecret(key.secret ?? null);
      form.reset();
      refresh();
    },
  });
  const revoke = useMutation({
    mutationFn: (keyId: string) =>
      unwrap(api.DELETE("/api/v1/orgs/{org_id}/api-keys/{key_id}", { params: { path: { org_id: orgId, key_id: keyId } } })),
    onSuccess: () => {
      notifySuccess("The key is revoked.");
      refresh();
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
          <Group align="flex-end">
            <TextInput label="New key name" placeholder="ci" required style={{ flex: 1 }} {...form.getInputProps("name")} />
            <Select label="Role" data={ROLES} allowDeselect={false} w={140} {...form.getInputProps("role")} />
            <Button type="submit" loading={create.isPending}>
              Create key
            </Button>
          </Group>
          {create.isError && <ProblemAlert error={create.error} title="Could not create the key" />}
        </form>
      </Paper>
      <Modal opened={secret !== null} onClose={() => setSecret(null)} title="Your new API key" centered size="lg">
        <Alert color="yellow" mb="md">
          Copy it now: it is shown only this once.
        </Alert>
        <Code block data-testid="api-key-secret">
          {secret}
        </Code>
        <Group justify="flex-end" mt="md">
          <CopyButton value={secret ?? ""}>
            {({ copied, copy }) => (
              <Button color={copied ? "teal" : "indigo"} onClick={copy}>
                {copied ? "Copied" : "Copy"}
              </Button>
            )}
          </CopyButton>
          <Button variant="default" onClick={() => setSecret(null)}>
            Done
          </Button>
        </Group>
      </Modal>
      <Loadable query={apiKeys}>
        {(data) =>
          data.items.length === 0 ? (
            <EmptyState title="No API keys">Create one for scripts and CI; use it as a bearer token.</EmptyState>
          ) : (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={560}>
                <Table aria-label="API keys">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Name</Table.Th>
                      <Table.Th>Role</Table.Th>
                      <Table.Th>Created</Table.Th>
                      <Table.Th>Last used</Table.Th>
                      <Table.Th />
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {data.items.map((k) => (
                      <Table.Tr key={k.id}>
                        <Table.Td>{k.name}</Table.Td>
                        <Table.Td>{k.role}</Table.Td>
                        <Table.Td>{dateTime(k.created_at)}</Table.Td>
                        <Table.Td>{k.revoked_at ? <Text c="red" size="sm">revoked</Text> : dateTime(k.last_used_at)}</Table.Td>
                        <Table.Td>
                          {!k.revoked_at && (
                            <ConfirmButton
                              size="xs"
                              label="Revoke"
                              title={`Revoke "${k.name}"?`}
                              message="Anything using this key is refused from now on. This cannot be undone."
                              confirmLabel="Revoke"
                              onConfirm={() => revoke.mutate(k.id)}
                            />
                          )}
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
    </Stack>
  );
}

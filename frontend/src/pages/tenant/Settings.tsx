import { Alert, Button, Code, CopyButton, Group, Modal, Paper, Select, Stack, Table, Tabs, Text, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useNavigate, useSearch } from "@tanstack/react-router";
import { useState } from "react";
import type { SettingsTab } from "../../router";
import { api, ApiError, type Schemas, unwrap } from "../../api/client";
import { keys, useMe } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime, words } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useAbilities, useOrgId } from "../../lib/orgId";
import { SshKeys } from "./SshKeys";
import { RegistryCredentials } from "./RegistryCredentials";
import { Webhooks } from "./Webhooks";
import { t } from "../../i18n";

const ROLES: Schemas["OrgRole"][] = ["owner", "admin", "member", "viewer", "billing"];
const roleOptions = () => ROLES.map((role) => ({ value: role, label: words(role) }));

export function SettingsPage() {
  const { tab } = useSearch({ strict: false }) as { tab?: SettingsTab };
  const navigate = useNavigate();
  const can = useAbilities(useOrgId());
  // Keys, webhooks and registry logins are the admins' to read and change.
  const shown = can.manage || tab === "ssh" ? (tab ?? "members") : "members";
  return (
    <>
      <PageHeader title={t("settings.title")} subtitle={t("settings.roleHelp")} />
      {!can.manage && (
        <Alert color="blue" variant="light" mb="md" data-testid="read-only">
          {t("settings.readOnly")}
        </Alert>
      )}
      <Tabs
        value={shown}
        onChange={(next) => void navigate({ to: ".", search: next && next !== "members" ? { tab: next as SettingsTab } : {}, replace: true })}
      >
        <Tabs.List mb="md">
          <Tabs.Tab value="members">{t("settings.members")}</Tabs.Tab>
          {can.manage && <Tabs.Tab value="keys">{t("settings.apiKeys")}</Tabs.Tab>}
          <Tabs.Tab value="ssh">{t("settings.sshKeys")}</Tabs.Tab>
          {can.manage && <Tabs.Tab value="webhooks">{t("settings.webhooks")}</Tabs.Tab>}
          {can.manage && <Tabs.Tab value="registries">{t("settings.registries")}</Tabs.Tab>}
        </Tabs.List>
        <Tabs.Panel value="members">
          <Members manage={can.manage} />
        </Tabs.Panel>
        {can.manage && (
          <Tabs.Panel value="keys">
            <ApiKeys />
          </Tabs.Panel>
        )}
        <Tabs.Panel value="ssh">
          <SshKeys />
        </Tabs.Panel>
        {can.manage && (
          <Tabs.Panel value="webhooks">
            <Webhooks />
          </Tabs.Panel>
        )}
        {can.manage && (
          <Tabs.Panel value="registries">
            <RegistryCredentials />
          </Tabs.Panel>
        )}
      </Tabs>
    </>
  );
}

/** The sign-up page for an invited email: signing up there joins, and owns no organization. */
function invitationLink(email: string): string {
  return `${window.location.origin}/sign-up?${new URLSearchParams({ invited: email }).toString()}`;
}

function Members({ manage }: { manage: boolean }) {
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
    validate: { email: (v) => (/^\S+@\S+$/.test(v) ? null : t("settings.emailRequired")) },
  });
  // Someone without an account is invited instead, and joins on sign-up.
  const add = useMutation({
    mutationFn: async (body: { email: string; role: Schemas["OrgRole"] }) => {
      const path = { params: { path: { org_id: orgId } }, body };
      try {
        return { member: await unwrap(api.POST("/api/v1/orgs/{org_id}/members", path)) };
      } catch (error) {
        if (!(error instanceof ApiError && error.code === "user_not_found")) throw error;
        return { invitation: await unwrap(api.POST("/api/v1/orgs/{org_id}/invitations", path)) };
      }
    },
    onSuccess: ({ member, invitation }) => {
      if (member) notifySuccess(t("settings.joined", { email: member.email, role: words(member.role) }));
      if (invitation) notifySuccess(t("settings.invited", { email: invitation.email, role: words(invitation.role) }));
      form.reset();
      refresh();
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "invitations") });
    },
  });
  const invitations = useQuery({
    queryKey: keys.org(orgId, "invitations"),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/invitations", { params: { path: { org_id: orgId } } })),
    enabled: manage,
  });
  const revoke = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.DELETE("/api/v1/orgs/{org_id}/invitations/{invitation_id}", { params: { path: { org_id: orgId, invitation_id: id } } })),
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "invitations") }),
    onError: (error) => notifyError(error),
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
      {manage && (
        <Paper withBorder p="md">
          <form onSubmit={form.onSubmit((v) => add.mutate(v))} noValidate>
            <Group align="flex-end">
              <TextInput label={t("settings.addByEmail")} placeholder={t("settings.emailExample")} required style={{ flex: 1 }} {...form.getInputProps("email")} />
              <Select label={t("settings.role")} data={roleOptions()} allowDeselect={false} w={140} {...form.getInputProps("role")} />
              <Button type="submit" loading={add.isPending}>
                {t("settings.add")}
              </Button>
            </Group>
            {add.isError && (
              <ProblemAlert error={add.error} title={t("settings.addFailed")} />
            )}
          </form>
          {invitations.data && invitations.data.length > 0 && (
            <>
              <Text size="xs" c="dimmed" mt="md">
                {t("settings.invitationLinkHint")}
              </Text>
              <Table mt="xs" aria-label={t("settings.pendingInvitations")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("settings.invitedEmail")}</Table.Th>
                    <Table.Th>{t("settings.role")}</Table.Th>
                    <Table.Th>{t("settings.expires")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {invitations.data.map((i) => (
                    <Table.Tr key={i.id}>
                      <Table.Td>{i.email}</Table.Td>
                      <Table.Td>{words(i.role)}</Table.Td>
                      <Table.Td>{dateTime(i.expires_at)}</Table.Td>
                      <Table.Td>
                        <Group gap={4} wrap="nowrap">
                          <CopyButton value={invitationLink(i.email)}>
                            {({ copied, copy }) => (
                              <Button size="compact-xs" variant="subtle" onClick={copy}>
                                {copied ? t("common.copied") : t("settings.copyInvitationLink")}
                              </Button>
                            )}
                          </CopyButton>
                          <Button size="compact-xs" variant="subtle" color="red" onClick={() => revoke.mutate(i.id)} loading={revoke.isPending}>
                            {t("settings.revokeInvitation")}
                          </Button>
                        </Group>
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </>
          )}
        </Paper>
      )}
      <Loadable query={members}>
        {(data) => (
          <Paper withBorder>
            <Table.ScrollContainer minWidth={560}>
              <Table aria-label={t("settings.members")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("settings.name")}</Table.Th>
                    <Table.Th>{t("settings.email")}</Table.Th>
                    <Table.Th>{t("settings.role")}</Table.Th>
                    <Table.Th>{t("settings.joinedAt")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.items.map((m) => (
                    <Table.Tr key={m.user_id}>
                      <Table.Td>{m.name}</Table.Td>
                      <Table.Td>{m.email}</Table.Td>
                      <Table.Td>
                        {manage ? (
                          <Select
                            aria-label={t("settings.roleOf", { email: m.email })}
                            size="xs"
                            w={120}
                            data={roleOptions()}
                            value={m.role}
                            allowDeselect={false}
                            onChange={(role) => role && change.mutate({ userId: m.user_id, role: role as Schemas["OrgRole"] })}
                          />
                        ) : (
                          words(m.role)
                        )}
                      </Table.Td>
                      <Table.Td>{dateTime(m.joined_at)}</Table.Td>
                      <Table.Td>
                        {manage && m.user_id !== me.data?.user?.id && (
                          <ConfirmButton
                            size="xs"
                            label={t("settings.remove")}
                            title={t("settings.removeTitle", { email: m.email })}
                            message={t("settings.removeBody")}
                            confirmLabel={t("settings.remove")}
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
    validate: { name: (v) => (v.trim() ? null : t("settings.keyNameRequired")) },
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
      notifySuccess(t("settings.keyRevoked"));
      refresh();
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
          <Group align="flex-end">
            <TextInput label={t("settings.newKeyName")} placeholder={t("settings.keyNameExample")} required style={{ flex: 1 }} {...form.getInputProps("name")} />
            <Select label={t("settings.role")} data={roleOptions()} allowDeselect={false} w={140} {...form.getInputProps("role")} />
            <Button type="submit" loading={create.isPending}>
              {t("settings.createKey")}
            </Button>
          </Group>
          {create.isError && <ProblemAlert error={create.error} title={t("settings.createFailed")} />}
        </form>
      </Paper>
      <Modal opened={secret !== null} onClose={() => setSecret(null)} title={t("settings.newKeyTitle")} centered size="lg" closeButtonProps={{ "aria-label": t("common.close") }}>
        <Alert color="yellow" mb="md">
          {t("settings.copyNow")}
        </Alert>
        <Code block data-testid="api-key-secret">
          {secret}
        </Code>
        <Group justify="flex-end" mt="md">
          <CopyButton value={secret ?? ""}>
            {({ copied, copy }) => (
              <Button color={copied ? "teal" : "indigo"} onClick={copy}>
                {copied ? t("common.copied") : t("common.copy")}
              </Button>
            )}
          </CopyButton>
          <Button variant="default" onClick={() => setSecret(null)}>
            {t("settings.done")}
          </Button>
        </Group>
      </Modal>
      <Loadable query={apiKeys}>
        {(data) =>
          data.items.length === 0 ? (
            <EmptyState title={t("settings.noKeysTitle")}>{t("settings.noKeysBody")}</EmptyState>
          ) : (
            <Paper withBorder>
              <Table.ScrollContainer minWidth={560}>
                <Table aria-label={t("settings.apiKeys")}>
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>{t("settings.name")}</Table.Th>
                      <Table.Th>{t("settings.role")}</Table.Th>
                      <Table.Th>{t("settings.created")}</Table.Th>
                      <Table.Th>{t("settings.lastUsed")}</Table.Th>
                      <Table.Th />
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {data.items.map((k) => (
                      <Table.Tr key={k.id}>
                        <Table.Td>{k.name}</Table.Td>
                        <Table.Td>{words(k.role)}</Table.Td>
                        <Table.Td>{dateTime(k.created_at)}</Table.Td>
                        <Table.Td>{k.revoked_at ? <Text c="red" size="sm">{t("settings.revoked")}</Text> : dateTime(k.last_used_at)}</Table.Td>
                        <Table.Td>
                          {!k.revoked_at && (
                            <ConfirmButton
                              size="xs"
                              label={t("settings.revoke")}
                              title={t("settings.revokeTitle", { name: k.name })}
                              message={t("settings.revokeBody")}
                              confirmLabel={t("settings.revoke")}
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

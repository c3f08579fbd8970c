import { Badge, Button, Code, CopyButton, Group, Modal, MultiSelect, Paper, Stack, Table, Text, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { dateTime } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useOrgId } from "../../lib/orgId";
import { t } from "../../i18n";

type Endpoint = Schemas["WebhookEndpoint"];
type Delivery = Schemas["WebhookDelivery"];

const DELIVERY_COLOURS: Record<string, string> = { pending: "yellow.4", succeeded: "green.4", failed: "red.4" };

/** The organization's webhook endpoints, their secrets and delivery logs. */
export function Webhooks() {
  const orgId = useOrgId();
  const queryClient = useQueryClient();
  const [secret, setSecret] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const endpoints = useQuery({
    queryKey: keys.org(orgId, "webhooks"),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/webhooks", { params: { path: { org_id: orgId } } })),
  });
  const eventTypes = useQuery({
    queryKey: ["webhooks", "event-types"],
    queryFn: () => unwrap(api.GET("/api/v1/webhooks/event-types")),
    staleTime: Infinity,
  });
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "webhooks") });
  const form = useForm({
    initialValues: { url: "", description: "", event_types: [] as string[] },
    validate: { url: (v) => (/^https?:\/\/\S+$/.test(v.trim()) ? null : t("webhooks.urlRequired")) },
  });
  const create = useMutation({
    mutationFn: (body: { url: string; description: string; event_types: string[] }) =>
      unwrap(api.POST("/api/v1/orgs/{org_id}/webhooks", { params: { path: { org_id: orgId } }, body })),
    onSuccess: (created) => {
      setSecret(created.secret);
      form.reset();
      refresh();
    },
  });
  const path = (endpoint: Endpoint) => ({ params: { path: { org_id: orgId, endpoint_id: endpoint.id } } });
  const change = useMutation({
    mutationFn: ({ endpoint, enabled }: { endpoint: Endpoint; enabled: boolean }) =>
      unwrap(api.PATCH("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}", { ...path(endpoint), body: { enabled } })),
    onSuccess: refresh,
    onError: (error) => notifyError(error),
  });
  const rotate = useMutation({
    mutationFn: (endpoint: Endpoint) =>
      unwrap(api.POST("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}/rotate-secret", { ...path(endpoint), body: {} })),
    onSuccess: (rotated) => {
      setSecret(rotated.secret);
      refresh();
    },
    onError: (error) => notifyError(error),
  });
  const test = useMutation({
    mutationFn: (endpoint: Endpoint) => unwrap(api.POST("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}/test", path(endpoint))),
    onSuccess: (_delivery, endpoint) => {
      notifySuccess(t("webhooks.testSent"));
      setOpen(endpoint.id);
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "webhooks", endpoint.id) });
    },
    onError: (error) => notifyError(error),
  });
  const remove = useMutation({
    mutationFn: (endpoint: Endpoint) => unwrap(api.DELETE("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}", path(endpoint))),
    onSuccess: () => {
      notifySuccess(t("webhooks.deleted"));
      refresh();
    },
    onError: (error) => notifyError(error),
  });

  return (
    <Stack>
      <Paper withBorder p="md">
        <form onSubmit={form.onSubmit((v) => create.mutate({ ...v, url: v.url.trim() }))} noValidate>
          <Stack>
            <TextInput label={t("webhooks.url")} description={t("webhooks.urlHint")} placeholder={t("webhooks.urlExample")} required {...form.getInputProps("url")} />
            <TextInput label={t("webhooks.description")} {...form.getInputProps("description")} />
            <MultiSelect
              label={t("webhooks.eventTypes")}
              description={t("webhooks.eventTypesHint")}
              data={eventTypes.data ?? []}
              searchable
              clearable
              {...form.getInputProps("event_types")}
            />
            <Group>
              <Button type="submit" loading={create.isPending}>
                {t("webhooks.add")}
              </Button>
            </Group>
            {create.isError && <ProblemAlert error={create.error} title={t("webhooks.addFailed")} />}
          </Stack>
        </form>
      </Paper>
      <Modal opened={secret !== null} onClose={() => setSecret(null)} title={t("webhooks.secretTitle")} centered size="lg" closeButtonProps={{ "aria-label": t("common.close") }}>
        <Text size="sm" mb="sm">
          {t("webhooks.secretBody")}
        </Text>
        <Code block data-testid="webhook-secret">
          {secret}
        </Code>
        <Group mt="md">
          <CopyButton value={secret ?? ""}>
            {({ copied, copy }) => (
              <Button variant="light" onClick={copy}>
                {copied ? t("common.copied") : t("common.copy")}
              </Button>
            )}
          </CopyButton>
          <Button onClick={() => setSecret(null)}>{t("webhooks.done")}</Button>
        </Group>
      </Modal>
      <Loadable query={endpoints}>
        {(data) =>
          data.length === 0 ? (
            <EmptyState title={t("webhooks.emptyTitle")}>{t("webhooks.emptyBody")}</EmptyState>
          ) : (
            <Stack>
              {data.map((endpoint) => (
                <Paper withBorder p="md" key={endpoint.id} data-testid="webhook-endpoint">
                  <Stack gap="xs">
                    <Group justify="space-between" wrap="wrap">
                      <Stack gap={2}>
                        <Code>{endpoint.url}</Code>
                        <Text size="sm" c="dimmed">
                          {endpoint.description || t("webhooks.noDescription")} ·{" "}
                          {endpoint.event_types.length === 0 ? t("webhooks.allEvents") : endpoint.event_types.join(", ")}
                        </Text>
                      </Stack>
                      <Badge color={endpoint.enabled ? "green.4" : "gray.3"} variant="filled" miw="max-content">
                        {endpoint.enabled ? t("webhooks.on") : t("webhooks.off")}
                      </Badge>
                    </Group>
                    {endpoint.disabled_reason && (
                      <Text size="sm" c="red.8">
                        {t("webhooks.turnedOff", { reason: endpoint.disabled_reason })}
                      </Text>
                    )}
                    {endpoint.failing_since && <Text size="sm">{t("webhooks.failingSince", { at: dateTime(endpoint.failing_since) })}</Text>}
                    <Group gap="xs">
                      <Button size="xs" variant="light" onClick={() => test.mutate(endpoint)} disabled={!endpoint.enabled}>
                        {t("webhooks.sendTest")}
                      </Button>
                      <Button size="xs" variant="light" onClick={() => setOpen(open === endpoint.id ? null : endpoint.id)}>
                        {open === endpoint.id ? t("webhooks.hideLog") : t("webhooks.showLog")}
                      </Button>
                      <Button size="xs" variant="default" onClick={() => change.mutate({ endpoint, enabled: !endpoint.enabled })}>
                        {endpoint.enabled ? t("webhooks.turnOff") : t("webhooks.turnOn")}
                      </Button>
                      <ConfirmButton
                        size="xs"
                        label={t("webhooks.rotate")}
                        title={t("webhooks.rotateTitle")}
                        message={t("webhooks.rotateBody")}
                        confirmLabel={t("webhooks.rotate")}
                        onConfirm={() => rotate.mutate(endpoint)}
                      />
                      <ConfirmButton
                        size="xs"
                        label={t("webhooks.delete")}
                        title={t("webhooks.deleteTitle")}
                        message={t("webhooks.deleteBody", { url: endpoint.url })}
                        confirmLabel={t("webhooks.delete")}
                        onConfirm={() => remove.mutate(endpoint)}
                      />
                    </Group>
                    {open === endpoint.id && <DeliveryLog endpoint={endpoint} />}
                  </Stack>
                </Paper>
              ))}
            </Stack>
          )
        }
      </Loadable>
    </Stack>
  );
}

/** An endpoint's deliveries, newest first, kept fresh while shown. */
function DeliveryLog({ endpoint }: { endpoint: Endpoint }) {
  const orgId = useOrgId();
  const queryClient = useQueryClient();
  const path = { params: { path: { org_id: orgId, endpoint_id: endpoint.id } } };
  const deliveries = useQuery({
    queryKey: keys.org(orgId, "webhooks", endpoint.id),
    queryFn: () => unwrap(api.GET("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}/deliveries", path)),
    refetchInterval: 2_000,
  });
  const redeliver = useMutation({
    mutationFn: (delivery: Delivery) =>
      unwrap(
        api.POST("/api/v1/orgs/{org_id}/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver", {
          params: { path: { org_id: orgId, endpoint_id: endpoint.id, delivery_id: delivery.id } },
        }),
      ),
    onSuccess: () => {
      notifySuccess(t("webhooks.redelivering"));
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "webhooks", endpoint.id) });
    },
    onError: (error) => notifyError(error),
  });
  return (
    <Loadable query={deliveries}>
      {(page) =>
        page.items.length === 0 ? (
          <Text size="sm" c="dimmed">
            {t("webhooks.noDeliveries")}
          </Text>
        ) : (
          <Table.ScrollContainer minWidth={640}>
            <Table aria-label={t("webhooks.logAria")}>
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t("webhooks.event")}</Table.Th>
                  <Table.Th>{t("webhooks.status")}</Table.Th>
                  <Table.Th>{t("webhooks.attempts")}</Table.Th>
                  <Table.Th>{t("webhooks.lastAnswer")}</Table.Th>
                  <Table.Th />
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {page.items.map((delivery) => {
                  const last = delivery.attempt_log.at(-1);
                  return (
                    <Table.Tr key={delivery.id}>
                      <Table.Td>
                        <Code>{delivery.event_type}</Code>
                        <Text size="xs" c="dimmed" ff="monospace">
                          {delivery.message_id}
                        </Text>
                        <Text size="xs" c="dimmed">
                          {dateTime(delivery.created_at)}
                        </Text>
                      </Table.Td>
                      <Table.Td>
                        <Badge color={DELIVERY_COLOURS[delivery.status] ?? "gray.3"} variant="filled" miw="max-content">
                          {t(`webhooks.deliveryStatus.${delivery.status}`, { defaultValue: delivery.status })}
                        </Badge>
                        {delivery.next_attempt_at && (
                          <Text size="xs">{t("webhooks.nextAttempt", { at: dateTime(delivery.next_attempt_at) })}</Text>
                        )}
                      </Table.Td>
                      <Table.Td>{delivery.attempts}</Table.Td>
                      <Table.Td data-testid="webhook-last-answer">
                        {last &&
                          (last.status_code !== null && last.status_code !== undefined
                            ? t("webhooks.answered", { status: last.status_code, ms: last.latency_ms })
                            : t("webhooks.noAnswer", { error: last.error ?? "", ms: last.latency_ms }))}
                        {last?.response_excerpt && (
                          <Text size="xs" c="dimmed" lineClamp={2}>
                            {last.response_excerpt}
                          </Text>
                        )}
                      </Table.Td>
                      <Table.Td>
                        <Button size="xs" variant="default" onClick={() => redeliver.mutate(delivery)} disabled={!endpoint.enabled}>
                          {t("webhooks.redeliver")}
                        </Button>
                      </Table.Td>
                    </Table.Tr>
                  );
                })}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        )
      }
    </Loadable>
  );
}

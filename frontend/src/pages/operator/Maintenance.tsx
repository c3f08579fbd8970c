import { Alert, Button, Group, NumberInput, Paper, Select, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { useState } from "react";
import { useAllNodes } from "../../api/admin";
import { ApiError, messageOf } from "../../api/client";
import { useOrgNames } from "../../api/queries";
import { addHours, useCancelMaintenance, useMaintenance, useScheduleMaintenance } from "../../api/reservations";
import { ConfirmButton } from "../../components/ConfirmButton";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { dateTime } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { t } from "../../i18n";
import { holdersOf } from "./NodeActions";
import { instantOfInput, zoneLabel } from "../../lib/zone";

/** Maintenance windows: schedule one on a node, see and cancel them. */
export function MaintenancePanel() {
  const nodes = useAllNodes(30_000);
  const windows = useMaintenance();
  const schedule = useScheduleMaintenance();
  const cancel = useCancelMaintenance();
  const [node, setNode] = useState<string | null>(null);
  const [start, setStart] = useState("");
  const [hours, setHours] = useState<number | string>(4);
  const [reason, setReason] = useState("");
  const startsAt = instantOfInput(start);
  const ask =
    node && reason.trim() && typeof hours === "number" && hours > 0
      ? {
          node,
          reason,
          starts_at: startsAt,
          ends_at: addHours(startsAt ?? new Date().toISOString(), hours),
        }
      : null;
  const submit = (force: boolean) =>
    ask &&
    schedule.mutate(
      { ask, force },
      {
        onSuccess: (w) => {
          notifySuccess(t("maintenance.scheduled", { node: w.node_name }));
          setReason("");
        },
      },
    );
  const breaks = schedule.error instanceof ApiError && schedule.error.code === "reservation_on_node";
  const names = useOrgNames().data;
  const chosen = nodes.data?.find((n) => n.name === node);
  // Like a drain, the window stops what runs there: the operator reads whose work first.
  const holders = chosen ? holdersOf(chosen, names) : "";
  const reserved = chosen?.reservations.map((r) => r.name) ?? [];
  return (
    <Stack>
      <Title order={4} mt="lg">
        {t("maintenance.title")}
      </Title>
      <Paper withBorder p="md">
        <form
          aria-label={t("maintenance.formAria")}
          onSubmit={(event) => {
            event.preventDefault();
            submit(false);
          }}
        >
          <Group align="flex-end" grow>
            <Select
              label={t("maintenance.node")}
              searchable
              data={(nodes.data ?? []).map((n) => n.name)}
              value={node}
              onChange={setNode}
              required
            />
            <TextInput
              type="datetime-local"
              label={t("maintenance.start", { zone: zoneLabel() })}
              description={t("maintenance.startHint")}
              value={start}
              onChange={(e) => setStart(e.currentTarget.value)}
            />
            <NumberInput label={t("maintenance.hours")} min={1} max={2160} value={hours} onChange={setHours} required />
            <TextInput label={t("maintenance.reason")} value={reason} onChange={(e) => setReason(e.currentTarget.value)} required />
            <Button type="submit" disabled={!ask} loading={schedule.isPending}>
              {t("maintenance.schedule")}
            </Button>
          </Group>
        </form>
        {chosen && (
          <Text size="sm" mt="sm" data-testid="maintenance-affects">
            {holders ? t("maintenance.affects", { node: chosen.name, holders }) : t("maintenance.affectsNothing", { node: chosen.name })}
          </Text>
        )}
        {schedule.isError && (
          <Alert color={breaks ? "yellow" : "red"} title={t("maintenance.notScheduled")} role="alert" mt="sm">
            {breaks ? t("maintenance.breaks", { node: chosen?.name ?? node ?? "", names: reserved.join(", ") }) : messageOf(schedule.error)}
            {breaks && (
              <Button mt="xs" size="compact-sm" color="red" onClick={() => submit(true)}>
                {t("maintenance.force")}
              </Button>
            )}
          </Alert>
        )}
      </Paper>
      {cancel.isError && <ProblemAlert error={cancel.error} title={t("maintenance.cancelFailed")} />}
      <Loadable query={windows}>
        {(list) =>
          list.length === 0 ? (
            <Text size="sm" c="dimmed">
              {t("maintenance.none")}
            </Text>
          ) : (
            <Paper withBorder>
              <Table striped aria-label={t("maintenance.tableAria")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("maintenance.node")}</Table.Th>
                    <Table.Th>{t("maintenance.window")}</Table.Th>
                    <Table.Th>{t("maintenance.reason")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {list.map((w) => (
                    <Table.Tr key={w.id}>
                      <Table.Td>{w.node_name}</Table.Td>
                      <Table.Td>
                        {dateTime(w.starts_at)} – {dateTime(w.ends_at)}
                      </Table.Td>
                      <Table.Td>{w.reason}</Table.Td>
                      <Table.Td>
                        <ConfirmButton
                          size="compact-sm"
                          label={t("maintenance.cancel")}
                          title={t("maintenance.cancelTitle", { node: w.node_name })}
                          message={t("maintenance.cancelBody")}
                          confirmLabel={t("maintenance.cancelConfirm")}
                          onConfirm={() => cancel.mutate(w.id)}
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

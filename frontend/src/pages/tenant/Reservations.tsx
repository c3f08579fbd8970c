import {
  Alert,
  Badge,
  Button,
  Grid,
  Group,
  NumberInput,
  Paper,
  Select,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
  UnstyledButton,
} from "@mantine/core";
import { useMemo, useState } from "react";
import { ApiError, messageOf, type Schemas } from "../../api/client";
import { useInstanceTypes, useRegions } from "../../api/queries";
import {
  addHours,
  nextHour,
  type Reservation,
  type ReservationAsk,
  useAvailability,
  useCancelReservation,
  useExtendReservation,
  useQuote,
  useReservations,
  useReserve,
} from "../../api/reservations";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { fitOf } from "../../lib/calendar";
import { HourGrid, hourGridClasses, hourLabel } from "../../components/HourGrid";
import { dateTime, gpuHours, money } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { useAbilities, useOrgId } from "../../lib/orgId";
import { instantOf, readerZone, wallOf, zoneLabel } from "../../lib/zone";
import { t } from "../../i18n";

const DAYS_SHOWN = 7;
const HOURS = Array.from({ length: 24 }, (_, h) => h);

type Draft = {
  name: string;
  instanceType: string;
  region: string;
  count: number | string;
  /** Start as `YYYY-MM-DD` and hour, on the reader's clock. */
  day: string;
  hour: string;
  hours: number | string;
};

function startOf(draft: Draft): string | null {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(draft.day) || draft.hour === "") return null;
  return instantOf(draft.day, Number(draft.hour));
}

/** The request the draft makes, once every field is filled. */
function askOf(draft: Draft): ReservationAsk | null {
  const starts = startOf(draft);
  if (!starts || !draft.instanceType || !draft.region) return null;
  if (typeof draft.count !== "number" || typeof draft.hours !== "number" || draft.hours < 1) return null;
  return {
    name: draft.name.trim() || null,
    instance_type: draft.instanceType,
    region: draft.region,
    count: draft.count,
    starts_at: starts,
    ends_at: addHours(starts, draft.hours),
  };
}

export function ReservationsPage() {
  const orgId = useOrgId();
  const can = useAbilities(orgId);
  const types = useInstanceTypes();
  const regions = useRegions();
  const [opened] = useState(() => Date.now());
  const first = nextHour(opened);
  const [draft, setDraft] = useState<Draft>({
    name: "",
    instanceType: "",
    region: "",
    count: 1,
    day: wallOf(first).day,
    hour: String(wallOf(first).hour),
    hours: 8,
  });
  const set = (change: Partial<Draft>) => setDraft((d) => ({ ...d, ...change }));
  const ask = askOf(draft);
  const quote = useQuote(orgId, ask);
  const availability = useAvailability(orgId, draft.instanceType, draft.region, first, DAYS_SHOWN * 24);
  const reserve = useReserve(orgId);
  const [refusal, setRefusal] = useState<Schemas["Window"][]>([]);

  const submit = () => {
    if (!ask) return;
    setRefusal([]);
    reserve.mutate(ask, {
      onSuccess: (r) => notifySuccess(t("reservations.confirmed", { name: r.name })),
      // Someone may have taken the window since the quote: offer what fits.
      onError: (error) => {
        if (error instanceof ApiError && error.code === "no_capacity") setRefusal(error.alternatives);
      },
    });
  };
  const pickStart = (iso: string) => {
    const wall = wallOf(iso);
    set({ day: wall.day, hour: String(wall.hour) });
  };

  const typeOptions = useMemo(
    () =>
      (types.data ?? [])
        .filter((type) => type.prices.some((p) => p.pricing_class === "reserved"))
        .map((type) => ({ value: type.name, label: t("reservations.typeOption", { name: type.name, count: type.gpus_per_node, model: type.gpu_model }) })),
    [types.data],
  );

  if (!can.order) {
    return (
      <>
        <PageHeader title={t("reservations.title")} subtitle={t("reservations.subtitle")} />
        <Alert color="blue" variant="light" mb="md" data-testid="read-only">
          {t("reservations.readOnly")}
        </Alert>
        <ReservationList orgId={orgId} actions={false} />
      </>
    );
  }
  return (
    <>
      <PageHeader
        title={t("reservations.title")}
        subtitle={t("reservations.subtitle")}
      />
      <Grid>
        <Grid.Col span={{ base: 12, md: 7 }}>
          <Paper withBorder p="md">
            <form
              id="new-reservation"
              aria-label={t("reservations.newAria")}
              onSubmit={(event) => {
                event.preventDefault();
                submit();
              }}
            >
              <Stack>
                <Group grow align="flex-start">
                  <Select
                    label={t("reservations.instanceType")}
                    placeholder={types.isPending ? t("reservations.loadingCatalog") : t("reservations.offeredReserved")}
                    data={typeOptions}
                    value={draft.instanceType || null}
                    onChange={(v) => v && set({ instanceType: v })}
                    allowDeselect={false}
                    searchable
                    required
                  />
                  <Select
                    label={t("reservations.region")}
                    data={(regions.data ?? []).map((r) => ({ value: r.name, label: `${r.display_name} (${r.name})` }))}
                    value={draft.region || null}
                    onChange={(v) => v && set({ region: v })}
                    allowDeselect={false}
                    required
                  />
                </Group>
                <Group grow align="flex-start">
                  <NumberInput
                    label={t("reservations.instances")}
                    description={t("reservations.instancesHint")}
                    min={1}
                    max={64}
                    allowDecimal={false}
                    value={draft.count}
                    onChange={(v) => set({ count: v })}
                    required
                  />
                  <NumberInput
                    label={t("reservations.hours")}
                    min={1}
                    max={2160}
                    allowDecimal={false}
                    value={draft.hours}
                    onChange={(v) => set({ hours: v })}
                    required
                  />
                </Group>
                <Group grow align="flex-start">
                  <TextInput
                    type="date"
                    label={t("reservations.startDay", { zone: zoneLabel() })}
                    value={draft.day}
                    onChange={(e) => set({ day: e.currentTarget.value })}
                    required
                  />
                  <Select
                    label={t("reservations.startHour", { zone: zoneLabel() })}
                    data={HOURS.map((h) => ({ value: String(h), label: hourLabel(h) }))}
                    value={draft.hour}
                    onChange={(v) => v && set({ hour: v })}
                    allowDeselect={false}
                    required
                  />
                </Group>
                <TextInput
                  label={t("reservations.name")}
                  description={t("reservations.nameHint")}
                  maxLength={64}
                  value={draft.name}
                  onChange={(e) => set({ name: e.currentTarget.value })}
                />
              </Stack>
            </form>
          </Paper>
        </Grid.Col>
        <Grid.Col span={{ base: 12, md: 5 }}>
          <Stack>
            <Paper withBorder p="md" aria-label={t("reservations.quoteAria")}>
              <Title order={4}>{t("reservations.priceAvailability")}</Title>
              {!ask ? (
                <Text size="sm" c="dimmed">
                  {t("reservations.fillIn")}
                </Text>
              ) : quote.isPending ? (
                <Text size="sm" c="dimmed">
                  {t("reservations.pricing")}
                </Text>
              ) : quote.isError ? (
                <ProblemAlert error={quote.error} title={t("reservations.cannotMake")} />
              ) : (
                <Quote quote={quote.data} now={opened} onPick={pickStart} />
              )}
            </Paper>
            {reserve.isError && (
              <Alert color="red" title={t("reservations.refused")} role="alert">
                {messageOf(reserve.error)}
                {refusal.length > 0 && <Alternatives windows={refusal} onPick={pickStart} />}
              </Alert>
            )}
            <Button
              type="submit"
              form="new-reservation"
              size="md"
              disabled={!ask || quote.data?.available === false}
              loading={reserve.isPending}
            >
              {t("reservations.reserve")}
            </Button>
          </Stack>
        </Grid.Col>
      </Grid>
      <Paper withBorder p="md" mt="md" aria-label={t("reservations.availabilityAria")}>
        <Title order={4}>{t("reservations.whenTitle")}</Title>
        <Text size="sm" c="dimmed" mb="xs">
          {t("reservations.whenBody", { count: DAYS_SHOWN, zone: zoneLabel() })}
        </Text>
        {!draft.instanceType || !draft.region ? (
          <Text size="sm" c="dimmed">
            {t("reservations.chooseTypeRegion")}
          </Text>
        ) : (
          <Loadable query={availability}>
            {(data) => (
              <Availability
                slots={data.slots}
                wanted={typeof draft.count === "number" ? draft.count : 1}
                chosen={startOf(draft)}
                onPick={pickStart}
              />
            )}
          </Loadable>
        )}
      </Paper>
      <Title order={3} mt="xl" mb="sm">
        {t("reservations.yours")}
      </Title>
      <ReservationList orgId={orgId} actions />
    </>
  );
}

function Quote({ quote, now, onPick }: { quote: Schemas["Quote"]; now: number; onPick: (iso: string) => void }) {
  return (
    <Stack gap={4}>
      <Text size="xl" fw={700} data-testid="reservation-total">
        {money(quote.total_micros, quote.currency)}
      </Text>
      <Text size="sm" c="dimmed">
        {t("reservations.quoteLine", {
          count: quote.count,
          type: quote.instance_type,
          gpus: quote.gpus,
          model: quote.gpu_model,
          region: quote.region,
          hourly: money(quote.hourly_micros, quote.currency),
          from: dateTime(quote.starts_at),
          to: dateTime(quote.ends_at),
        })}
      </Text>
      {quote.available ? (
        <Badge color="green.4" variant="filled" data-testid="reservation-available">
          {t("reservations.available")}
        </Badge>
      ) : (
        <Alert color="yellow" title={t("reservations.notFree")}>
          {quote.alternatives.length ? (
            <Alternatives windows={quote.alternatives} onPick={onPick} />
          ) : (
            t("reservations.noWindow")
          )}
        </Alert>
      )}
      <Text size="xs" c="dimmed" mt="xs">
        {Date.parse(quote.free_cancellation_until) > now
          ? t("reservations.freeCancel", { at: dateTime(quote.free_cancellation_until), percent: quote.cancellation_fee_percent })
          : t("reservations.inNotice", { percent: quote.cancellation_fee_percent })}
      </Text>
    </Stack>
  );
}

function Alternatives({ windows, onPick }: { windows: Schemas["Window"][]; onPick: (iso: string) => void }) {
  return (
    <Stack gap={4} mt={4}>
      <Text size="sm">{t("reservations.earliest")}</Text>
      <Group gap="xs">
        {windows.map((w) => (
          <Button key={w.starts_at} size="compact-sm" variant="light" onClick={() => onPick(w.starts_at)}>
            from {dateTime(w.starts_at)}
          </Button>
        ))}
      </Group>
    </Stack>
  );
}

function Availability({
  slots,
  wanted,
  chosen,
  onPick,
}: {
  slots: Schemas["AvailabilitySlot"][];
  wanted: number;
  chosen: string | null;
  onPick: (iso: string) => void;
}) {
  return (
    <HourGrid
      slots={slots}
      label={t("reservations.gridLabel", { zone: zoneLabel() })}
      cell={(slot, day, hour) => (
        <UnstyledButton
          className={hourGridClasses.cell}
          data-fit={fitOf(slot.instances, wanted)}
          data-chosen={slot.starts_at === chosen || undefined}
          aria-label={t("reservations.slotLabel", { day, hour: hourLabel(hour), zone: readerZone(), count: slot.instances })}
          onClick={() => onPick(slot.starts_at)}
        >
          {slot.instances}
        </UnstyledButton>
      )}
    />
  );
}

function ReservationList({ orgId, actions }: { orgId: string; actions: boolean }) {
  const reservations = useReservations(orgId);
  const cancel = useCancelReservation(orgId);
  const extend = useExtendReservation(orgId);
  return (
    <Loadable query={reservations}>
      {(rows) =>
        rows.length === 0 ? (
          <EmptyState title={t("reservations.emptyTitle")}>{t("reservations.emptyBody")}</EmptyState>
        ) : (
          <Paper withBorder>
            {cancel.isError && <ProblemAlert error={cancel.error} title={t("reservations.notCancelled")} />}
            {extend.isError && <ProblemAlert error={extend.error} title={t("reservations.notExtended")} />}
            <Table.ScrollContainer minWidth={900}>
              <Table striped aria-label={t("reservations.title")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("reservations.name")}</Table.Th>
                    <Table.Th>{t("reservations.capacity")}</Table.Th>
                    <Table.Th>{t("reservations.window")}</Table.Th>
                    <Table.Th>{t("reservations.state")}</Table.Th>
                    <Table.Th ta="right">{t("reservations.usedReserved")}</Table.Th>
                    <Table.Th ta="right">{t("reservations.cost")}</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {rows.map((r) => (
                    <ReservationRow
                      key={r.id}
                      reservation={r}
                      actions={actions}
                      onCancel={() => cancel.mutate(r.id)}
                      onExtend={(hours) =>
                        extend.mutate(
                          { id: r.id, endsAt: addHours(r.ends_at, hours) },
                          { onSuccess: (x) => notifySuccess(t("reservations.extended", { name: x.name, at: dateTime(x.ends_at) })) },
                        )
                      }
                    />
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

function ReservationRow({
  reservation: r,
  actions,
  onCancel,
  onExtend,
}: {
  reservation: Reservation;
  actions: boolean;
  onCancel: () => void;
  onExtend: (hours: number) => void;
}) {
  const [more, setMore] = useState<number | string>(1);
  const hours = typeof more === "number" && more >= 1 ? more : null;
  return (
    <Table.Tr>
      <Table.Td>
        <Text size="sm" fw={500}>
          {r.name}
        </Text>
        <Text size="xs" c="dimmed">
          {r.placement.map((p) => p.node_name).join(", ")}
        </Text>
      </Table.Td>
      <Table.Td>
        {t("reservations.capacityLine", { count: r.count, type: r.instance_type, region: r.region })}
      </Table.Td>
      <Table.Td>
        {dateTime(r.starts_at)} – {dateTime(r.ends_at)}
      </Table.Td>
      <Table.Td>
        <StatusBadge status={r.state} />
      </Table.Td>
      <Table.Td ta="right">
        {gpuHours(r.used_gpu_seconds)} / {gpuHours(r.reserved_gpu_seconds)}
      </Table.Td>
      <Table.Td ta="right">
        {money(r.total_micros, r.currency)}
        {r.cancellation_fee_micros > 0 && (
          <Text size="xs" c="dimmed">
            {t("reservations.inclFee", { fee: money(r.cancellation_fee_micros, r.currency) })}
          </Text>
        )}
      </Table.Td>
      <Table.Td>
        {actions && (r.state === "upcoming" || r.state === "active") && (
          <Group gap={4} wrap="nowrap">
            <NumberInput
              aria-label={t("reservations.hoursToAdd", { name: r.name })}
              size="xs"
              w={64}
              min={1}
              max={2160}
              allowDecimal={false}
              value={more}
              onChange={setMore}
            />
            <ConfirmButton
              size="compact-sm"
              tone="indigo"
              disabled={hours === null}
              label={t("reservations.extend")}
              title={t("reservations.extendTitle", { name: r.name, count: hours ?? 0 })}
              message={t("reservations.extendBody", {
                count: hours ?? 0,
                at: dateTime(addHours(r.ends_at, hours ?? 0)),
                cost: money(r.hourly_micros * r.count * (hours ?? 0), r.currency),
                rate: money(r.hourly_micros, r.currency),
              })}
              confirmLabel={t("reservations.extendConfirm")}
              onConfirm={() => hours !== null && onExtend(hours)}
            />
            <ConfirmButton
              size="compact-sm"
              label={t("reservations.cancel")}
              title={t("reservations.cancelTitle", { name: r.name })}
              message={`${t("reservations.cancelBody")} ${
                !r.cancel_now
                  ? ""
                  : r.cancel_now.total_micros === 0
                    ? t("reservations.cancelFree", { until: dateTime(r.cancel_now.free_until) })
                    : t("reservations.cancelCosts", {
                        total: money(r.cancel_now.total_micros, r.currency),
                        fee: money(r.cancel_now.fee_micros, r.currency),
                      })
              }`}
              confirmLabel={t("reservations.cancelConfirm")}
              onConfirm={onCancel}
            />
          </Group>
        )}
      </Table.Td>
    </Table.Tr>
  );
}

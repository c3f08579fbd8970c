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
import { fitOf } from "../../lib/calendar";
import { HourGrid, hourGridClasses, hourLabel } from "../../components/HourGrid";
import { dateTime, gpuHours, money, words } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { useOrgId } from "../../lib/orgId";

const DAYS_SHOWN = 7;
const HOURS = Array.from({ length: 24 }, (_, h) => h);
const STATE_COLOURS: Record<Schemas["ReservationState"], string> = {
  upcoming: "blue",
  active: "green",
  ended: "gray",
  cancelled: "gray",
};

type Draft = {
  name: string;
  instanceType: string;
  region: string;
  count: number | string;
  /** Start as `YYYY-MM-DD` and hour (UTC). */
  day: string;
  hour: string;
  hours: number | string;
};

function startOf(draft: Draft): string | null {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(draft.day) || draft.hour === "") return null;
  return `${draft.day}T${draft.hour.padStart(2, "0")}:00:00Z`;
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
  const types = useInstanceTypes();
  const regions = useRegions();
  const [opened] = useState(() => Date.now());
  const first = nextHour(opened);
  const [draft, setDraft] = useState<Draft>({
    name: "",
    instanceType: "",
    region: "",
    count: 1,
    day: first.slice(0, 10),
    hour: String(new Date(first).getUTCHours()),
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
      onSuccess: (r) => notifySuccess(`Reservation ${r.name} confirmed`),
      // Someone may have taken the window since the quote: offer what fits.
      onError: (error) => {
        if (error instanceof ApiError && error.code === "no_capacity") setRefusal(error.alternatives);
      },
    });
  };
  const pickStart = (iso: string) => set({ day: iso.slice(0, 10), hour: String(new Date(iso).getUTCHours()) });

  const typeOptions = useMemo(
    () =>
      (types.data ?? [])
        .filter((t) => t.prices.some((p) => p.pricing_class === "reserved"))
        .map((t) => ({ value: t.name, label: `${t.name} — ${t.gpus_per_node} × ${t.gpu_model}` })),
    [types.data],
  );

  return (
    <>
      <PageHeader
        title="Reservations"
        subtitle="Hold exact GPUs for a window of whole hours at the reserved price; orders you place in the reservation start on them ahead of any queue."
      />
      <Grid>
        <Grid.Col span={{ base: 12, md: 7 }}>
          <Paper withBorder p="md">
            <form
              id="new-reservation"
              aria-label="New reservation"
              onSubmit={(event) => {
                event.preventDefault();
                submit();
              }}
            >
              <Stack>
                <Group grow align="flex-start">
                  <Select
                    label="Instance type"
                    placeholder={types.isPending ? "Loading the catalog…" : "Offered reserved"}
                    data={typeOptions}
                    value={draft.instanceType || null}
                    onChange={(v) => v && set({ instanceType: v })}
                    allowDeselect={false}
                    searchable
                    required
                  />
                  <Select
                    label="Region"
                    data={(regions.data ?? []).map((r) => ({ value: r.name, label: `${r.display_name} (${r.name})` }))}
                    value={draft.region || null}
                    onChange={(v) => v && set({ region: v })}
                    allowDeselect={false}
                    required
                  />
                </Group>
                <Group grow align="flex-start">
                  <NumberInput
                    label="Instances"
                    description="Each on its own node."
                    min={1}
                    max={64}
                    allowDecimal={false}
                    value={draft.count}
                    onChange={(v) => set({ count: v })}
                    required
                  />
                  <NumberInput
                    label="Hours"
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
                    label="Start day (UTC)"
                    value={draft.day}
                    onChange={(e) => set({ day: e.currentTarget.value })}
                    required
                  />
                  <Select
                    label="Start hour (UTC)"
                    data={HOURS.map((h) => ({ value: String(h), label: hourLabel(h) }))}
                    value={draft.hour}
                    onChange={(v) => v && set({ hour: v })}
                    allowDeselect={false}
                    required
                  />
                </Group>
                <TextInput
                  label="Name"
                  description="Optional; the type, count and start when empty."
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
            <Paper withBorder p="md" aria-label="Reservation quote">
              <Title order={4}>Price and availability</Title>
              {!ask ? (
                <Text size="sm" c="dimmed">
                  Fill in the form to see the price.
                </Text>
              ) : quote.isPending ? (
                <Text size="sm" c="dimmed">
                  Pricing…
                </Text>
              ) : quote.isError ? (
                <ProblemAlert error={quote.error} title="This reservation cannot be made" />
              ) : (
                <Quote quote={quote.data} now={opened} onPick={pickStart} />
              )}
            </Paper>
            {reserve.isError && (
              <Alert color="red" title="The reservation was refused" role="alert">
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
              Reserve
            </Button>
          </Stack>
        </Grid.Col>
      </Grid>
      <Paper withBorder p="md" mt="md" aria-label="Availability">
        <Title order={4}>What can be reserved when</Title>
        <Text size="sm" c="dimmed" mb="xs">
          Instances free in each hour (UTC) for the next {DAYS_SHOWN} days; choose an hour to start there.
        </Text>
        {!draft.instanceType || !draft.region ? (
          <Text size="sm" c="dimmed">
            Choose an instance type and a region.
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
        Your reservations
      </Title>
      <ReservationList orgId={orgId} />
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
        {quote.count} × {quote.instance_type} ({quote.gpus} {quote.gpu_model} GPUs) in {quote.region} at{" "}
        {money(quote.hourly_micros, quote.currency)} per instance-hour, {dateTime(quote.starts_at)} to{" "}
        {dateTime(quote.ends_at)}
      </Text>
      {quote.available ? (
        <Badge color="green" variant="filled" data-testid="reservation-available">
          Available
        </Badge>
      ) : (
        <Alert color="yellow" title="Not free for the whole window">
          {quote.alternatives.length ? (
            <Alternatives windows={quote.alternatives} onPick={onPick} />
          ) : (
            "No window of this length fits in the next four weeks."
          )}
        </Alert>
      )}
      <Text size="xs" c="dimmed" mt="xs">
        {Date.parse(quote.free_cancellation_until) > now
          ? `Free to cancel until ${dateTime(quote.free_cancellation_until)}; later, `
          : "This window starts within the free cancellation period: if cancelled, "}
        {quote.cancellation_fee_percent}% of the reserved time not yet begun is charged. The whole window is billed
        whether used or not.
      </Text>
    </Stack>
  );
}

function Alternatives({ windows, onPick }: { windows: Schemas["Window"][]; onPick: (iso: string) => void }) {
  return (
    <Stack gap={4} mt={4}>
      <Text size="sm">The earliest windows that fit:</Text>
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
      label="Instances free to reserve, by hour (UTC)"
      cell={(slot, day, hour) => (
        <UnstyledButton
          className={hourGridClasses.cell}
          data-fit={fitOf(slot.instances, wanted)}
          data-chosen={slot.starts_at === chosen || undefined}
          aria-label={`${day} ${hourLabel(hour)} UTC: ${slot.instances} free`}
          onClick={() => onPick(slot.starts_at)}
        >
          {slot.instances}
        </UnstyledButton>
      )}
    />
  );
}

function ReservationList({ orgId }: { orgId: string }) {
  const reservations = useReservations(orgId);
  const cancel = useCancelReservation(orgId);
  const extend = useExtendReservation(orgId);
  return (
    <Loadable query={reservations}>
      {(rows) =>
        rows.length === 0 ? (
          <EmptyState title="No reservations yet">Reserve capacity above for a training run or a launch.</EmptyState>
        ) : (
          <Paper withBorder>
            {cancel.isError && <ProblemAlert error={cancel.error} title="The reservation was not cancelled" />}
            {extend.isError && <ProblemAlert error={extend.error} title="The reservation was not extended" />}
            <Table.ScrollContainer minWidth={900}>
              <Table striped aria-label="Reservations">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>Name</Table.Th>
                    <Table.Th>Capacity</Table.Th>
                    <Table.Th>Window</Table.Th>
                    <Table.Th>State</Table.Th>
                    <Table.Th ta="right">Used / reserved GPU-h</Table.Th>
                    <Table.Th ta="right">Cost</Table.Th>
                    <Table.Th />
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {rows.map((r) => (
                    <ReservationRow
                      key={r.id}
                      reservation={r}
                      onCancel={() => cancel.mutate(r.id)}
                      onExtend={(hours) =>
                        extend.mutate(
                          { id: r.id, endsAt: addHours(r.ends_at, hours) },
                          { onSuccess: (x) => notifySuccess(`Reservation ${x.name} now ends ${dateTime(x.ends_at)}`) },
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
  onCancel,
  onExtend,
}: {
  reservation: Reservation;
  onCancel: () => void;
  onExtend: (hours: number) => void;
}) {
  const [more, setMore] = useState<number | string>(1);
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
        {r.count} × {r.instance_type} in {r.region}
      </Table.Td>
      <Table.Td>
        {dateTime(r.starts_at)} – {dateTime(r.ends_at)}
      </Table.Td>
      <Table.Td>
        <Badge color={STATE_COLOURS[r.state]} variant="filled">
          {words(r.state)}
        </Badge>
      </Table.Td>
      <Table.Td ta="right">
        {gpuHours(r.used_gpu_seconds)} / {gpuHours(r.reserved_gpu_seconds)}
      </Table.Td>
      <Table.Td ta="right">
        {money(r.total_micros, r.currency)}
        {r.cancellation_fee_micros > 0 && (
          <Text size="xs" c="dimmed">
            incl. {money(r.cancellation_fee_micros, r.currency)} cancellation fee
          </Text>
        )}
      </Table.Td>
      <Table.Td>
        {(r.state === "upcoming" || r.state === "active") && (
          <Group gap={4} wrap="nowrap">
            <NumberInput
              aria-label={`Hours to add to ${r.name}`}
              size="xs"
              w={64}
              min={1}
              max={2160}
              allowDecimal={false}
              value={more}
              onChange={setMore}
            />
            <Button
              size="compact-sm"
              variant="default"
              disabled={typeof more !== "number" || more < 1}
              onClick={() => typeof more === "number" && onExtend(more)}
            >
              Extend
            </Button>
            <ConfirmButton
              size="compact-sm"
              label="Cancel"
              title={`Cancel reservation ${r.name}?`}
              message="Its GPUs are released at once and orders running in it are stopped. A cancellation inside the notice period is charged as the quote said."
              confirmLabel="Cancel reservation"
              onConfirm={onCancel}
            />
          </Group>
        )}
      </Table.Td>
    </Table.Tr>
  );
}

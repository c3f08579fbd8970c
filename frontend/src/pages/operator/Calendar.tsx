import { Group, Paper, Select, Table, Text, Title, Tooltip } from "@mantine/core";
import { useState } from "react";
import { useGpuModelNames, useOrgNames, useRegions } from "../../api/queries";
import { nextHour, addHours, useCapacityCalendar } from "../../api/reservations";
import { EmptyState } from "../../components/EmptyState";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { MaintenancePanel } from "./Maintenance";
import { dateTime } from "../../lib/format";
import { HourGrid, hourGridClasses, hourLabel } from "../../components/HourGrid";

const DAYS_SHOWN = 14;
const ALL_REGIONS = "";

export function CalendarPage() {
  const models = useGpuModelNames();
  const regions = useRegions();
  const orgs = useOrgNames();
  const [model, setModel] = useState<string | null>(null);
  const [region, setRegion] = useState(ALL_REGIONS);
  const chosen = model ?? models.data?.[0] ?? "";
  const from = addHours(nextHour(), -1);
  const calendar = useCapacityCalendar(chosen, region || null, from, DAYS_SHOWN * 24);
  const names = orgs.data ?? new Map<string, string>();
  return (
    <>
      <PageHeader
        title="Reservation calendar"
        subtitle="Hour by hour (UTC): GPUs held by reservations and maintenance, committed to running work, and free, with the reservations behind them; schedule maintenance below."
      />
      <Group mb="md">
        <Select
          label="GPU model"
          data={models.data ?? []}
          value={chosen || null}
          onChange={(v) => v && setModel(v)}
          allowDeselect={false}
        />
        <Select
          label="Region"
          data={[
            { value: ALL_REGIONS, label: "All regions" },
            ...(regions.data ?? []).map((r) => ({ value: r.name, label: r.name })),
          ]}
          value={region}
          onChange={(v) => setRegion(v ?? ALL_REGIONS)}
          allowDeselect={false}
        />
      </Group>
      <Loadable query={calendar}>
        {(data) => (
          <>
            <Paper withBorder p="md" aria-label="Capacity by hour">
              <Text size="sm" c="dimmed" mb="xs">
                Each hour shows free / all healthy {data.gpu_model} GPUs; blue is reserved, grey committed.
              </Text>
              <HourGrid
                slots={data.slots}
                label={`${data.gpu_model} GPUs by hour (UTC)`}
                cell={(s, day, hour) => {
                  const label = `${day} ${hourLabel(hour)} UTC: ${s.reserved} reserved, ${s.committed} committed, ${s.free} free of ${s.gpus}`;
                  const reserved = s.gpus ? (100 * s.reserved) / s.gpus : 0;
                  const taken = s.gpus ? (100 * (s.reserved + s.committed)) / s.gpus : 0;
                  return (
                    <Tooltip label={label} openDelay={150}>
                      <div
                        className={hourGridClasses.cell}
                        aria-label={label}
                        style={{
                          background: `linear-gradient(to right, var(--mantine-color-blue-light) ${reserved}%, var(--mantine-color-gray-light) ${reserved}% ${taken}%, transparent 0)`,
                        }}
                      >
                        {s.free}/{s.gpus}
                      </div>
                    </Tooltip>
                  );
                }}
              />
            </Paper>
            <Title order={4} mt="lg" mb="xs">
              Reservations in these two weeks
            </Title>
            {data.reservations.length === 0 ? (
              <EmptyState title="No reservations">None of the {data.gpu_model} GPUs are reserved in this period.</EmptyState>
            ) : (
              <Paper withBorder>
                <Table.ScrollContainer minWidth={800}>
                  <Table striped aria-label="Reservations in the calendar">
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th>Organization</Table.Th>
                        <Table.Th>Name</Table.Th>
                        <Table.Th>Capacity</Table.Th>
                        <Table.Th>Window</Table.Th>
                        <Table.Th>Nodes</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {data.reservations.map((r) => (
                        <Table.Tr key={r.id}>
                          <Table.Td>{names.get(r.org_id) ?? r.org_id}</Table.Td>
                          <Table.Td>{r.name}</Table.Td>
                          <Table.Td>
                            {r.count} × {r.instance_type} in {r.region}
                          </Table.Td>
                          <Table.Td>
                            {dateTime(r.starts_at)} – {dateTime(r.ends_at)}
                          </Table.Td>
                          <Table.Td>{r.placement.map((p) => p.node_name).join(", ")}</Table.Td>
                        </Table.Tr>
                      ))}
                    </Table.Tbody>
                  </Table>
                </Table.ScrollContainer>
              </Paper>
            )}
          </>
        )}
      </Loadable>
      <MaintenancePanel />
    </>
  );
}

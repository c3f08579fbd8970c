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
import { readerZone, zoneLabel } from "../../lib/zone";
import { t } from "../../i18n";

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
        title={t("calendar.title")}
        subtitle={t("calendar.subtitle")}
      />
      <Group mb="md">
        <Select
          label={t("calendar.gpuModel")}
          w={220}
          data={models.data ?? []}
          value={chosen || null}
          onChange={(v) => v && setModel(v)}
          allowDeselect={false}
        />
        <Select
          label={t("calendar.region")}
          data={[
            { value: ALL_REGIONS, label: t("calendar.allRegions") },
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
            <Paper withBorder p="md" aria-label={t("shape.capacityByHour")}>
              <Text size="sm" c="dimmed" mb="xs">
                {t("calendar.legend", { model: data.gpu_model })}
              </Text>
              <HourGrid
                slots={data.slots}
                label={t("calendar.gridLabel", { model: data.gpu_model, zone: zoneLabel() })}
                cell={(s, day, hour) => {
                  const label = t("calendar.slot", {
                    day,
                    hour: hourLabel(hour),
                    zone: readerZone(),
                    reserved: s.reserved,
                    committed: s.committed,
                    free: s.free,
                    gpus: s.gpus,
                  });
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
              {t("calendar.inPeriod")}
            </Title>
            {data.reservations.length === 0 ? (
              <EmptyState title={t("calendar.noneTitle")}>{t("calendar.noneBody", { model: data.gpu_model })}</EmptyState>
            ) : (
              <Paper withBorder>
                <Table.ScrollContainer minWidth={800}>
                  <Table striped aria-label={t("calendar.tableAria")}>
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th>{t("calendar.organization")}</Table.Th>
                        <Table.Th>{t("calendar.name")}</Table.Th>
                        <Table.Th>{t("calendar.capacity")}</Table.Th>
                        <Table.Th>{t("calendar.window")}</Table.Th>
                        <Table.Th>{t("calendar.nodes")}</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {data.reservations.map((r) => (
                        <Table.Tr key={r.id}>
                          <Table.Td>{names.get(r.org_id) ?? r.org_id}</Table.Td>
                          <Table.Td>{r.name}</Table.Td>
                          <Table.Td>
                            {t("calendar.capacityLine", { count: r.count, type: r.instance_type, region: r.region })}
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

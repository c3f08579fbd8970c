import { Button, Group, NumberInput, Paper, Select, Stack, Table, Text, TextInput } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useState } from "react";
import { useRegions } from "../../api/queries";
import { storagePriceOf, useStoragePrices, useVolumeChanges, useVolumes, type Volume } from "../../api/volumes";
import { ConfirmButton } from "../../components/ConfirmButton";
import { EmptyState } from "../../components/EmptyState";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { StatusBadge } from "../../components/StatusBadge";
import { gib, money, number, words } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useAbilities, useOrgId } from "../../lib/orgId";
import { t } from "../../i18n";

type Draft = { name: string; region: string; kind: "local" | "shared"; sizeGib: number | string };

/** The organization's volumes: size, use and cost; made, grown and deleted here. */
export function VolumesPage() {
  const orgId = useOrgId();
  const can = useAbilities(orgId);
  const volumes = useVolumes(orgId);
  const regions = useRegions();
  const prices = useStoragePrices();
  const changes = useVolumeChanges(orgId);
  const form = useForm<Draft>({
    initialValues: { name: "", region: "", kind: "local", sizeGib: 100 },
    validate: {
      name: (v) => (/^[a-z0-9][a-z0-9-]{0,62}$/.test(v) ? null : t("volumes.nameFormat")),
      region: (v) => (v ? null : t("volumes.regionRequired")),
      sizeGib: (v) => (typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 65536 ? null : t("volumes.sizeRange")),
    },
  });
  const create = (draft: Draft) =>
    changes.create.mutate(
      { name: draft.name, region: draft.region, kind: draft.kind, size_gib: Number(draft.sizeGib) },
      {
        onSuccess: (volume) => {
          notifySuccess(t("volumes.created", { name: volume.name, node: volume.node ?? "—" }));
          form.reset();
        },
      },
    );

  return (
    <Stack>
      <PageHeader title={t("volumes.title")} subtitle={t("volumes.subtitle")} />
      {can.order && (
        <Paper withBorder p="md">
          <form onSubmit={form.onSubmit(create)} noValidate>
            <Group align="flex-start" grow>
              <TextInput label={t("volumes.name")} placeholder={t("volumes.nameExample")} required {...form.getInputProps("name")} />
              <Select
                label={t("volumes.region")}
                data={(regions.data ?? []).map((r) => r.name)}
                required
                {...form.getInputProps("region")}
              />
              <Select
                label={t("volumes.kind")}
                description={t("volumes.kindHint")}
                data={(["local", "shared"] as const).map((kind) => ({ value: kind, label: words(kind) }))}
                allowDeselect={false}
                {...form.getInputProps("kind")}
              />
              <NumberInput label={t("volumes.sizeGib")} min={1} max={65536} required {...form.getInputProps("sizeGib")} />
            </Group>
            <Group mt="md">
              <Button type="submit" loading={changes.create.isPending}>
                {t("volumes.create")}
              </Button>
            </Group>
            {changes.create.isError && <ProblemAlert error={changes.create.error} title={t("volumes.createFailed")} />}
          </form>
        </Paper>
      )}
      <Loadable query={volumes}>
        {(data) =>
          data.length === 0 ? (
            <EmptyState title={t("volumes.emptyTitle")}>{t("volumes.emptyBody")}</EmptyState>
          ) : (
            <Paper withBorder>
              <Table aria-label={t("volumes.tableAria")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>{t("volumes.name")}</Table.Th>
                    <Table.Th>{t("volumes.status")}</Table.Th>
                    <Table.Th>{t("volumes.kind")}</Table.Th>
                    <Table.Th>{t("volumes.where")}</Table.Th>
                    <Table.Th>{t("volumes.size")}</Table.Th>
                    <Table.Th>{t("volumes.used")}</Table.Th>
                    <Table.Th>{t("volumes.cost")}</Table.Th>
                    <Table.Th>{t("volumes.orders")}</Table.Th>
                    {can.order && <Table.Th />}
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {data.map((volume) => (
                    <VolumeRow key={volume.id} volume={volume} price={storagePriceOf(prices.data ?? [], volume.kind, volume.region)} canChange={can.order} changes={changes} />
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

function VolumeRow({
  volume,
  price,
  canChange,
  changes,
}: {
  volume: Volume;
  price: number | undefined;
  canChange: boolean;
  changes: ReturnType<typeof useVolumeChanges>;
}) {
  const [size, setSize] = useState<number | string>(volume.size_gib);
  const used = volume.used_bytes == null ? "—" : t("volumes.gib", { value: gib(volume.used_bytes) });
  return (
    <Table.Tr>
      <Table.Td>{volume.name}</Table.Td>
      <Table.Td>
        <StatusBadge status={volume.status} />
        {volume.status_reason && (
          <Text size="xs" c="dimmed">
            {volume.status_reason}
          </Text>
        )}
      </Table.Td>
      <Table.Td>{words(volume.kind)}</Table.Td>
      <Table.Td>{volume.node ? `${volume.region} · ${volume.node}` : volume.region}</Table.Td>
      <Table.Td>{t("volumes.gib", { value: number(volume.size_gib) })}</Table.Td>
      <Table.Td>{used}</Table.Td>
      <Table.Td>{price == null ? t("volumes.noPrice") : t("volumes.perMonth", { amount: money(price * volume.size_gib) })}</Table.Td>
      <Table.Td>{volume.orders.length ? volume.orders.map((o) => o.name).join(", ") : "—"}</Table.Td>
      {canChange && (
        <Table.Td>
          <Group gap="xs" wrap="nowrap">
            <NumberInput size="xs" w={90} min={volume.size_gib} max={65536} value={size} onChange={setSize} aria-label={t("volumes.growTo", { name: volume.name })} />
            <Button
              size="xs"
              variant="default"
              disabled={typeof size !== "number" || size <= volume.size_gib}
              loading={changes.grow.isPending}
              onClick={() =>
                changes.grow.mutate(
                  { id: volume.id, sizeGib: Number(size) },
                  { onSuccess: (grown) => notifySuccess(t("volumes.grown", { name: grown.name, size: grown.size_gib })), onError: (error) => notifyError(error) },
                )
              }
            >
              {t("volumes.grow")}
            </Button>
            <ConfirmButton
              size="xs"
              label={t("volumes.delete")}
              title={t("volumes.deleteTitle", { name: volume.name })}
              message={t("volumes.deleteBody")}
              confirmLabel={t("volumes.delete")}
              onConfirm={() =>
                changes.remove.mutate(volume.id, { onSuccess: () => notifySuccess(t("volumes.deleted", { name: volume.name })), onError: (error) => notifyError(error) })
              }
            />
          </Group>
        </Table.Td>
      )}
    </Table.Tr>
  );
}

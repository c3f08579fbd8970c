import {
  Badge,
  Button,
  Grid,
  Group,
  NumberInput,
  Paper,
  SegmentedControl,
  Select,
  Stack,
  Table,
  TextInput,
  Title,
  VisuallyHidden,
} from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useGpuModelNames, useInstanceTypes, useRegions } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime, money, words } from "../../lib/format";
import { instantOfInput, zoneLabel } from "../../lib/zone";
import { notifyError, notifySuccess } from "../../lib/notify";
import { ImagePolicy, ImagesTable, NewImage } from "./ImagesAdmin";
import { DeclareSharedFileSystem, SharedFileSystems } from "./SharedStorageAdmin";
import { DeclareSlurmCluster, SlurmClusters } from "./SlurmAdmin";
import { t } from "../../i18n";

const CLASSES: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];

export function CatalogAdminPage() {
  const types = useInstanceTypes();
  return (
    <>
      <PageHeader title={t("catalogAdmin.title")} subtitle={t("catalogAdmin.subtitle")} />
      <Grid>
        <Grid.Col span={{ base: 12, lg: 8 }}>
          <Loadable query={types}>
            {(list) => (
              <Paper withBorder>
                <Table.ScrollContainer minWidth={720}>
                  <Table striped aria-label={t("catalogAdmin.versions")}>
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th>{t("catalogAdmin.type")}</Table.Th>
                        <Table.Th>{t("catalogAdmin.class")}</Table.Th>
                        <Table.Th>{t("catalogAdmin.region")}</Table.Th>
                        <Table.Th ta="right">{t("catalogAdmin.perNodeHour")}</Table.Th>
                        <Table.Th>{t("catalogAdmin.effectiveFrom")}</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {list.flatMap((type) =>
                        [...type.prices]
                          .sort((a, b) => `${a.pricing_class}${a.region ?? ""}${a.effective_from}`.localeCompare(`${b.pricing_class}${b.region ?? ""}${b.effective_from}`))
                          .map((p) => (
                            <Table.Tr key={p.id}>
                              <Table.Td>{type.name}</Table.Td>
                              <Table.Td>{words(p.pricing_class)}</Table.Td>
                              <Table.Td>{p.region ?? t("catalogAdmin.all")}</Table.Td>
                              <Table.Td ta="right">{money(p.hourly_micros)}</Table.Td>
                              <Table.Td>{dateTime(p.effective_from)}</Table.Td>
                            </Table.Tr>
                          )),
                      )}
                    </Table.Tbody>
                  </Table>
                </Table.ScrollContainer>
              </Paper>
            )}
          </Loadable>
          <Title order={3} mt="lg" mb="sm">
            {t("catalogAdmin.images")}
          </Title>
          <ImagesTable />
          <Title order={3} mt="lg" mb="sm">
            {t("sharedFs.title")}
          </Title>
          <SharedFileSystems />
          <Title order={3} mt="lg" mb="sm">
            {t("slurm.title")}
          </Title>
          <SlurmClusters />
        </Grid.Col>
        <Grid.Col span={{ base: 12, lg: 4 }}>
          <Stack>
            <NewPrice types={types.data ?? []} />
            <NewInstanceType />
            <NewImage />
            <ImagePolicy />
            <DeclareSharedFileSystem />
            <DeclareSlurmCluster />
          </Stack>
        </Grid.Col>
      </Grid>
    </>
  );
}

function NewPrice({ types }: { types: Schemas["InstanceType"][] }) {
  const queryClient = useQueryClient();
  const regions = useRegions();
  const form = useForm({
    initialValues: { instanceType: "", pricingClass: "on_demand", region: "", hourly: 0 as number | string, effectiveFrom: "" },
    validate: {
      instanceType: (v) => (v ? null : t("catalogAdmin.typeRequired")),
      hourly: (v) => (typeof v === "number" && v > 0 ? null : t("catalogAdmin.pricePositive")),
    },
  });
  const create = useMutation({
    mutationFn: (v: typeof form.values) =>
      unwrap(
        api.POST("/api/v1/admin/catalog/instance-types/{instance_type_id}/prices", {
          params: { path: { instance_type_id: v.instanceType } },
          body: {
            pricing_class: v.pricingClass as Schemas["PricingClass"],
            region: v.region || null,
            hourly_micros: Math.round(Number(v.hourly) * 1_000_000),
            effective_from: instantOfInput(v.effectiveFrom),
          },
        }),
      ),
    onSuccess: (_price, v) => {
      notifySuccess(t("catalogAdmin.priceAdded"));
      // The type stays chosen, so its versions below show the new one.
      form.setValues({ hourly: 0, effectiveFrom: "" });
      void queryClient.invalidateQueries({ queryKey: keys.catalog("instance-types") });
      void queryClient.invalidateQueries({ queryKey: keys.catalog("price-versions", v.instanceType) });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("catalogAdmin.newPrice")}
      </Title>
      <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
        <Stack gap="xs">
          <Select label={t("catalogAdmin.instanceType")} data={types.map((type) => ({ value: type.id, label: type.name }))} required searchable {...form.getInputProps("instanceType")} />
          <Select label={t("catalogAdmin.pricingClass")} data={CLASSES.map((c) => ({ value: c, label: words(c) }))} allowDeselect={false} {...form.getInputProps("pricingClass")} />
          <Select
            label={t("catalogAdmin.region")}
            data={[{ value: "", label: t("catalogAdmin.allRegions") }, ...(regions.data ?? []).map((r) => ({ value: r.name, label: r.name }))]}
            allowDeselect={false}
            {...form.getInputProps("region")}
          />
          <NumberInput label={t("catalogAdmin.perNodeHour")} min={0} decimalScale={4} required {...form.getInputProps("hourly")} />
          <TextInput
            label={t("catalogAdmin.effectiveFromIn", { zone: zoneLabel() })}
            description={t("catalogAdmin.effectiveHint")}
            type="datetime-local"
            {...form.getInputProps("effectiveFrom")}
          />
          {create.isError && <ProblemAlert error={create.error} title={t("catalogAdmin.priceRefused")} />}
          <Button type="submit" loading={create.isPending}>
            {t("catalogAdmin.addPrice")}
          </Button>
        </Stack>
      </form>
      {form.values.instanceType && (
        <PriceVersions typeId={form.values.instanceType} name={types.find((type) => type.id === form.values.instanceType)?.name ?? ""} />
      )}
    </Paper>
  );
}

/**
 * Every price version of one type, scheduled ones too: the catalog lists
 * only prices in force, so a change set for later is reviewed here.
 */
function PriceVersions({ typeId, name }: { typeId: string; name: string }) {
  const versions = useQuery({
    queryKey: keys.catalog("price-versions", typeId),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/instance-types/{instance_type_id}/prices", { params: { path: { instance_type_id: typeId } } })),
  });
  const [now] = useState(() => Date.now());
  const queryClient = useQueryClient();
  const withdraw = useMutation({
    mutationFn: (priceId: string) =>
      unwrap(
        api.DELETE("/api/v1/admin/catalog/instance-types/{instance_type_id}/prices/{price_id}", {
          params: { path: { instance_type_id: typeId, price_id: priceId } },
        }),
      ),
    onSuccess: () => {
      notifySuccess(t("catalogAdmin.priceWithdrawn"));
      void queryClient.invalidateQueries({ queryKey: keys.catalog("price-versions", typeId) });
    },
    onError: (error) => notifyError(error),
  });
  return (
    <Loadable query={versions}>
      {(list) => {
        // Newest first: the first version of a class and region that has begun is the one in force.
        const begun = new Set<string>();
        return (
          <Table mt="md" aria-label={t("catalogAdmin.versionsOf", { name })}>
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t("catalogAdmin.class")}</Table.Th>
                <Table.Th ta="right">{t("catalogAdmin.perNodeHour")}</Table.Th>
                <Table.Th>{t("catalogAdmin.effectiveFrom")}</Table.Th>
                <Table.Th>
                  <VisuallyHidden>{t("catalogAdmin.actions")}</VisuallyHidden>
                </Table.Th>
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {list.map((p) => {
                const key = `${p.pricing_class}/${p.region ?? ""}`;
                const scheduled = Date.parse(p.effective_from) > now;
                const inForce = !scheduled && !begun.has(key);
                if (!scheduled) begun.add(key);
                return (
                  <Table.Tr key={p.id}>
                    <Table.Td>
                      {words(p.pricing_class)} · {p.region ?? t("catalogAdmin.all")}
                    </Table.Td>
                    <Table.Td ta="right">{money(p.hourly_micros)}</Table.Td>
                    <Table.Td>
                      {dateTime(p.effective_from)}{" "}
                      {(scheduled || inForce) && (
                        <Badge size="xs" variant="light" color={scheduled ? "blue" : "green"}>
                          {t(scheduled ? "catalogAdmin.scheduled" : "catalogAdmin.inForce")}
                        </Badge>
                      )}
                    </Table.Td>
                    <Table.Td>
                      {scheduled && (
                        <ConfirmButton
                          size="compact-xs"
                          label={t("catalogAdmin.withdraw")}
                          aria-label={t("catalogAdmin.withdrawAria", { price: money(p.hourly_micros), from: dateTime(p.effective_from) })}
                          title={t("catalogAdmin.withdrawTitle")}
                          message={t("catalogAdmin.withdrawMessage", { price: money(p.hourly_micros), from: dateTime(p.effective_from) })}
                          confirmLabel={t("catalogAdmin.withdraw")}
                          loading={withdraw.isPending && withdraw.variables === p.id}
                          onConfirm={() => withdraw.mutate(p.id)}
                        />
                      )}
                    </Table.Td>
                  </Table.Tr>
                );
              })}
            </Table.Tbody>
          </Table>
        );
      }}
    </Loadable>
  );
}

/** What an instance type sells of its GPUs. */
type Share = "whole" | "fraction" | "mig";

function NewInstanceType() {
  const queryClient = useQueryClient();
  const models = useGpuModelNames();
  const form = useForm({
    initialValues: {
      name: "",
      gpu_model: "",
      gpus_per_node: 8,
      vcpus: 96,
      memory_gib: 1024,
      disk_gib: 0,
      share: "whole" as Share,
      gpu_milli: 250,
      mig_profile: "",
    },
    validate: {
      name: (v) => (/^[a-z0-9][a-z0-9-]{0,62}$/.test(v) ? null : t("catalogAdmin.nameFormat")),
      gpu_model: (v) => (v ? null : t("catalogAdmin.modelRequired")),
    },
  });
  const create = useMutation({
    mutationFn: ({ share, gpu_milli, mig_profile, ...rest }: typeof form.values) =>
      unwrap(
        api.POST("/api/v1/admin/catalog/instance-types", {
          body: {
            ...rest,
            ...(share === "fraction" ? { gpus_per_node: 1, gpu_milli } : {}),
            ...(share === "mig" ? { gpus_per_node: 1, mig_profile } : {}),
          },
        }),
      ),
    onSuccess: (type) => {
      notifySuccess(t("catalogAdmin.typeAdded", { name: type.name }));
      form.reset();
      void queryClient.invalidateQueries({ queryKey: keys.catalog("instance-types") });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("catalogAdmin.newType")}
      </Title>
      <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
        <Stack gap="xs">
          <TextInput label={t("catalogAdmin.name")} placeholder={t("catalogAdmin.nameExample")} required {...form.getInputProps("name")} />
          <Select label={t("catalogAdmin.gpuModel")} data={models.data ?? []} required {...form.getInputProps("gpu_model")} />
          <SegmentedControl
            aria-label={t("catalogAdmin.sells")}
            data={[
              { value: "whole", label: t("catalogAdmin.whole") },
              { value: "fraction", label: t("catalogAdmin.fraction") },
              { value: "mig", label: t("catalogAdmin.mig") },
            ]}
            {...form.getInputProps("share")}
          />
          {form.values.share === "fraction" && (
            <NumberInput
              label={t("catalogAdmin.share")}
              description={t("catalogAdmin.shareHint")}
              min={125}
              max={875}
              step={125}
              allowDecimal={false}
              {...form.getInputProps("gpu_milli")}
            />
          )}
          {form.values.share === "mig" && (
            <TextInput
              label={t("catalogAdmin.migProfile")}
              description={t("catalogAdmin.migHint")}
              placeholder={t("catalogAdmin.migExample")}
              {...form.getInputProps("mig_profile")}
            />
          )}
          <Group grow>
            <NumberInput
              label={t("catalogAdmin.gpusPerNode")}
              min={1}
              max={16}
              allowDecimal={false}
              disabled={form.values.share !== "whole"}
              {...form.getInputProps("gpus_per_node")}
            />
            <NumberInput label={t("catalogAdmin.vcpus")} min={1} allowDecimal={false} {...form.getInputProps("vcpus")} />
          </Group>
          <Group grow>
            <NumberInput label={t("catalogAdmin.memory")} min={1} allowDecimal={false} {...form.getInputProps("memory_gib")} />
            <NumberInput label={t("catalogAdmin.disk")} min={0} allowDecimal={false} {...form.getInputProps("disk_gib")} />
          </Group>
          {create.isError && <ProblemAlert error={create.error} title={t("catalogAdmin.typeRefused")} />}
          <Button type="submit" loading={create.isPending}>
            {t("catalogAdmin.addType")}
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

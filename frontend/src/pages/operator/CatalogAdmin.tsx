import {
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
} from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "../../api/client";
import { keys, useGpuModelNames, useInstanceTypes, useRegions } from "../../api/queries";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { dateTime, money, words } from "../../lib/format";
import { notifySuccess } from "../../lib/notify";
import { ImagesTable, NewImage } from "./ImagesAdmin";

const CLASSES: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];

export function CatalogAdminPage() {
  const types = useInstanceTypes();
  return (
    <>
      <PageHeader title="Catalog & prices" subtitle="Prices are versioned: a new price takes effect at its date and never rewrites the past." />
      <Grid>
        <Grid.Col span={{ base: 12, lg: 8 }}>
          <Loadable query={types}>
            {(list) => (
              <Paper withBorder>
                <Table.ScrollContainer minWidth={720}>
                  <Table striped aria-label="Price versions">
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th>Type</Table.Th>
                        <Table.Th>Class</Table.Th>
                        <Table.Th>Region</Table.Th>
                        <Table.Th ta="right">Per node-hour</Table.Th>
                        <Table.Th>Effective from</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {list.flatMap((t) =>
                        [...t.prices]
                          .sort((a, b) => `${a.pricing_class}${a.region ?? ""}${a.effective_from}`.localeCompare(`${b.pricing_class}${b.region ?? ""}${b.effective_from}`))
                          .map((p) => (
                            <Table.Tr key={p.id}>
                              <Table.Td>{t.name}</Table.Td>
                              <Table.Td>{words(p.pricing_class)}</Table.Td>
                              <Table.Td>{p.region ?? "all"}</Table.Td>
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
            Images
          </Title>
          <ImagesTable />
        </Grid.Col>
        <Grid.Col span={{ base: 12, lg: 4 }}>
          <Stack>
            <NewPrice types={types.data ?? []} />
            <NewInstanceType />
            <NewImage />
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
      instanceType: (v) => (v ? null : "Choose an instance type"),
      hourly: (v) => (typeof v === "number" && v > 0 ? null : "A positive hourly price"),
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
            effective_from: v.effectiveFrom ? new Date(v.effectiveFrom).toISOString() : null,
          },
        }),
      ),
    onSuccess: () => {
      notifySuccess("Price version added.");
      form.reset();
      void queryClient.invalidateQueries({ queryKey: keys.catalog("instance-types") });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        New price version
      </Title>
      <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
        <Stack gap="xs">
          <Select label="Instance type" data={types.map((t) => ({ value: t.id, label: t.name }))} required searchable {...form.getInputProps("instanceType")} />
          <Select label="Pricing class" data={CLASSES.map((c) => ({ value: c, label: words(c) }))} allowDeselect={false} {...form.getInputProps("pricingClass")} />
          <Select
            label="Region"
            data={[{ value: "", label: "all regions" }, ...(regions.data ?? []).map((r) => ({ value: r.name, label: r.name }))]}
            allowDeselect={false}
            {...form.getInputProps("region")}
          />
          <NumberInput label="Per node-hour" min={0} decimalScale={4} required {...form.getInputProps("hourly")} />
          <TextInput label="Effective from" description="Empty: now" type="datetime-local" {...form.getInputProps("effectiveFrom")} />
          {create.isError && <ProblemAlert error={create.error} title="The price was refused" />}
          <Button type="submit" loading={create.isPending}>
            Add price
          </Button>
        </Stack>
      </form>
    </Paper>
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
      name: (v) => (/^[a-z0-9][a-z0-9-]{0,62}$/.test(v) ? null : "Lower-case letters, digits and dashes"),
      gpu_model: (v) => (v ? null : "Choose a GPU model"),
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
    onSuccess: (t) => {
      notifySuccess(`${t.name} added; give it prices before tenants can order it.`);
      form.reset();
      void queryClient.invalidateQueries({ queryKey: keys.catalog("instance-types") });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        New instance type
      </Title>
      <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
        <Stack gap="xs">
          <TextInput label="Name" placeholder="h100x2" required {...form.getInputProps("name")} />
          <Select label="GPU model" data={models.data ?? []} required {...form.getInputProps("gpu_model")} />
          <SegmentedControl
            aria-label="What it sells of the GPU"
            data={[
              { value: "whole", label: "Whole GPUs" },
              { value: "fraction", label: "Fraction of a GPU" },
              { value: "mig", label: "MIG instance" },
            ]}
            {...form.getInputProps("share")}
          />
          {form.values.share === "fraction" && (
            <NumberInput
              label="Share of one GPU (thousandths)"
              description="In steps of 125: 250 is a quarter. Shares one GPU with other orders."
              min={125}
              max={875}
              step={125}
              allowDecimal={false}
              {...form.getInputProps("gpu_milli")}
            />
          )}
          {form.values.share === "mig" && (
            <TextInput
              label="MIG profile"
              description="As NVIDIA names it for the model, such as 1g.10gb or 3g.40gb; runs on GPUs in MIG mode."
              placeholder="1g.10gb"
              {...form.getInputProps("mig_profile")}
            />
          )}
          <Group grow>
            <NumberInput
              label="GPUs per node"
              min={1}
              max={16}
              allowDecimal={false}
              disabled={form.values.share !== "whole"}
              {...form.getInputProps("gpus_per_node")}
            />
            <NumberInput label="vCPUs" min={1} allowDecimal={false} {...form.getInputProps("vcpus")} />
          </Group>
          <Group grow>
            <NumberInput label="Memory (GiB)" min={1} allowDecimal={false} {...form.getInputProps("memory_gib")} />
            <NumberInput label="Disk (GiB)" min={0} allowDecimal={false} {...form.getInputProps("disk_gib")} />
          </Group>
          {create.isError && <ProblemAlert error={create.error} title="The instance type was refused" />}
          <Button type="submit" loading={create.isPending}>
            Add instance type
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

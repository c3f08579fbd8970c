import {
  Alert,
  Autocomplete,
  Button,
  Checkbox,
  Grid,
  Group,
  MultiSelect,
  NumberInput,
  Paper,
  SegmentedControl,
  Select,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { useMemo } from "react";
import { JobFields } from "./JobFields";
import { VolumeFields } from "./VolumeFields";
import { api, ApiError, type Schemas, unwrap } from "../../api/client";
import {
  keys,
  useImagePolicy,
  useImages,
  useInstanceTypes,
  useLaunchAvailability,
  useQuotas,
  useRegions,
  useSshKeys,
} from "../../api/queries";
import { AnchorLink } from "../../components/links";
import { ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { gpuShape } from "../../lib/capacity";
import { dateTime, money, words } from "../../lib/format";
import { liveReservations, useReservations } from "../../api/reservations";
import { useVolumes } from "../../api/volumes";
import { useOrgId } from "../../lib/orgId";
import { estimate, perGpuHour, priceInForce } from "../../lib/pricing";
import { checkQuota, type QuotaCheck } from "../../lib/quota";
import { i18n, t } from "../../i18n";

const PRICING: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];
const PRIORITY: Schemas["PriorityClass"][] = ["standard", "production", "batch", "preemptible"];
const WORKLOAD: Schemas["WorkloadClass"][] = ["training", "fine_tuning", "inference", "dev", "batch", "hpo"];
const ANY_REGION = "";

export type Values = {
  kind: "instance" | "job";
  command: string;
  args: string;
  env: string;
  /** Variables whose values the API never shows again. */
  secrets: { name: string; value: string }[];
  workingDir: string;
  walltimeMinutes: number | string;
  retryOnFailure: boolean;
  maxRetries: number | string;
  arrayCount: number | string;
  dependsOn: string;
  dependencyCondition: "after_ok" | "after_any";
  instanceType: string;
  nodeCount: number;
  region: string;
  pricingClass: Schemas["PricingClass"];
  priorityClass: Schemas["PriorityClass"];
  workloadClass: Schemas["WorkloadClass"];
  durationHours: number | string;
  checkpointable: boolean;
  image: string;
  sshKeyIds: string[];
  ports: string;
  reservationId: string;
  name: string;
  /** Volumes of the organization to attach, each at its own path. */
  volumes: { volumeId: string; mountPath: string; readOnly: boolean }[];
};

/** Where the API names a field in its refusal, the form field that holds it. */
const FIELDS: Record<string, keyof Values> = {
  name: "name",
  instance_type: "instanceType",
  node_count: "nodeCount",
  region: "region",
  duration_seconds: "durationHours",
  pricing_class: "pricingClass",
  priority_class: "priorityClass",
  workload_class: "workloadClass",
  image: "image",
  "job.image": "image",
  "job.command": "command",
  "job.args": "args",
  "job.env": "env",
  "job.secret_env": "secrets",
  "job.working_dir": "workingDir",
  "job.max_runtime_seconds": "walltimeMinutes",
  "job.retry.max_retries": "maxRetries",
  "job.array_count": "arrayCount",
  "job.depends_on": "dependsOn",
  ssh_key_ids: "sshKeyIds",
  ports: "ports",
  reservation_id: "reservationId",
};

/** Where the API names an attached volume's field, the form's path to it. */
function volumeFieldOf(apiField: string): string | undefined {
  const match = /^volumes\[(\d+)\]\.(volume_id|mount_path)$/.exec(apiField);
  return match ? `volumes.${match[1]}.${match[2] === "volume_id" ? "volumeId" : "mountPath"}` : undefined;
}

/** A share of one GPU (a fraction or a MIG instance) runs on one node: the API refuses a gang of them. */
function sharesOneGpu(type: { gpu_milli?: number | null; mig_profile?: string | null }): boolean {
  return Boolean(type.gpu_milli || type.mig_profile);
}

/** The form field an API field error belongs to, if the form shows one. */
function fieldOf(apiField: string): keyof Values | undefined {
  return FIELDS[apiField.replace(/\[\d+\]$/, "").replace(/^job\.(env|secret_env)\..*/, "job.$1")];
}

/** `8888, 6006` as port numbers; null when empty. */
export function portsOf(text: string): number[] | null {
  const ports = text
    .split(/[\s,]+/)
    .filter(Boolean)
    .map(Number);
  return ports.length ? ports : null;
}

export function LaunchPage() {
  const orgId = useOrgId();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const types = useInstanceTypes();
  const regions = useRegions();
  const quotas = useQuotas(orgId);
  const images = useImages();
  const imagePolicy = useImagePolicy();
  const sshKeys = useSshKeys();
  const reservations = useReservations(orgId);
  const volumes = useVolumes(orgId);
  const live = liveReservations(reservations.data);

  const form = useForm<Values>({
    initialValues: {
      kind: "instance",
      command: "",
      args: "",
      env: "",
      secrets: [],
      workingDir: "",
      walltimeMinutes: "",
      retryOnFailure: false,
      maxRetries: 3,
      arrayCount: "",
      dependsOn: "",
      dependencyCondition: "after_ok",
      instanceType: "",
      nodeCount: 1,
      region: ANY_REGION,
      pricingClass: "on_demand",
      priorityClass: "standard",
      workloadClass: "training",
      durationHours: "",
      checkpointable: false,
      image: "",
      sshKeyIds: [],
      ports: "",
      reservationId: "",
      name: "",
      volumes: [],
    },
    validate: {
      name: (v) => (v === "" || /^[a-z0-9][a-z0-9-]{0,62}$/.test(v) ? null : t("launch.nameFormat")),
      command: (v, all) => (all.kind === "job" && !v.trim() ? t("launch.commandRequired") : null),
      env: (v) => (lines(v).every((line) => line.includes("=") && VARIABLE_NAME.test(line.slice(0, line.indexOf("=")))) ? null : t("launch.envFormat")),
      secrets: {
        name: (name, all, path) => {
          const at = Number(path.split(".")[1]);
          if (!VARIABLE_NAME.test(name)) return t("launch.secretName");
          if (all.secrets.some((s, i) => i < at && s.name === name) || envNames(all.env).includes(name)) return t("launch.secretTwice", { name });
          return null;
        },
        value: (value) => (value ? null : t("launch.secretValue")),
      },
      instanceType: (v) => (v ? null : t("launch.typeRequired")),
      nodeCount: (v) => (Number.isInteger(v) && v >= 1 && v <= 64 ? null : t("launch.nodeRange")),
      durationHours: (v) => (v === "" || (typeof v === "number" && v > 0) ? null : t("launch.durationFormat")),
      ports: (v) =>
        (portsOf(v) ?? []).every((p) => Number.isInteger(p) && p >= 1 && p <= 65535)
          ? null
          : t("launch.portsFormat"),
      reservationId: (v, all) => (all.pricingClass === "reserved" && !v ? t("launch.reservationRequired") : null),
      volumes: {
        volumeId: (v) => (v ? null : t("launch.volumeRequired")),
        mountPath: (v, all, path) => {
          const at = Number(path.split(".")[1]);
          if (!/^\/[^\0]*[^/]$/.test(v)) return t("launch.mountPathHint");
          if (all.volumes.some((other, i) => i < at && other.mountPath === v)) return t("launch.mountPathTwice", { path: v });
          return null;
        },
      },
    },
  });
  const values = form.getValues();
  const chosenReservation = values.pricingClass === "reserved" ? live.find((r) => r.id === values.reservationId) : undefined;

  const selected = types.data?.find((t) => t.name === values.instanceType);
  const sharesGpu = Boolean(selected && sharesOneGpu(selected));
  const region = values.region || null;
  const durationSeconds = typeof values.durationHours === "number" ? Math.round(values.durationHours * 3600) : null;
  const price = selected ? priceInForce(selected.prices, values.pricingClass, region) : undefined;
  const availability = useLaunchAvailability(selected?.id);
  const members = values.kind === "job" && typeof values.arrayCount === "number" ? values.arrayCount : 1;
  const cost = estimate(price, values.nodeCount, durationSeconds, members);
  const requested = selected ? selected.gpus_per_node * values.nodeCount : 0;
  const quota = selected && quotas.data ? checkQuota(quotas.data, selected.gpu_model, region, requested) : null;

  const typeOptions = useMemo(() => {
    const byModel = new Map<string, { value: string; label: string }[]>();
    for (const type of types.data ?? []) {
      const items = byModel.get(type.gpu_model) ?? [];
      items.push({ value: type.name, label: i18n.t("launch.typeOption", { name: type.name, shape: gpuShape(type), vcpus: type.vcpus, memory: type.memory_gib }) });
      byModel.set(type.gpu_model, items);
    }
    return [...byModel.entries()].map(([group, items]) => ({ group, items }));
  }, [types.data]);

  const submit = useMutation({
    mutationFn: (v: Values) =>
      unwrap(
        api.POST("/api/v1/orgs/{org_id}/orders", {
          params: { path: { org_id: orgId } },
          body: {
            name: v.name || null,
            instance_type: v.instanceType,
            node_count: v.nodeCount,
            region: v.region || null,
            pricing_class: v.pricingClass,
            priority_class: v.priorityClass,
            workload_class: v.workloadClass,
            duration_seconds: typeof v.durationHours === "number" ? Math.round(v.durationHours * 3600) : null,
            checkpointable: v.checkpointable,
            job: v.kind === "job" ? jobOf(v) : null,
            image: v.image.trim() || null,
            ssh_key_ids: v.kind === "instance" && v.sshKeyIds.length ? v.sshKeyIds : null,
            ports: v.kind === "instance" ? portsOf(v.ports) : null,
            reservation_id: v.pricingClass === "reserved" ? v.reservationId : null,
            volumes: v.volumes.length ? v.volumes.map((a) => ({ volume_id: a.volumeId, mount_path: a.mountPath, read_only: a.readOnly })) : null,
          },
        }),
      ),
    onSuccess: (order) => {
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId) });
      void navigate({ to: "/orgs/$orgId/orders/$orderId", params: { orgId, orderId: order.id } });
    },
    onError: (error) => {
      if (error instanceof ApiError) {
        for (const f of error.fieldErrors) {
          const field = fieldOf(f.field) ?? volumeFieldOf(f.field);
          if (field) form.setFieldError(field, f.message);
        }
      }
    },
  });

  return (
    <>
      <PageHeader
        title={t("launch.title")}
        subtitle={t("launch.subtitle")}
      />
      <form onSubmit={form.onSubmit((v) => submit.mutate(v))} noValidate>
        <Grid>
          <Grid.Col span={{ base: 12, md: 7 }}>
            <Paper withBorder p="md">
              <Stack>
                <div>
                  <Text size="sm" fw={500} id="kind-label">
                    {t("launch.what")}
                  </Text>
                  <SegmentedControl
                    aria-labelledby="kind-label"
                    fullWidth
                    data={[
                      { value: "instance", label: t("launch.kindInstance") },
                      { value: "job", label: t("launch.kindJob") },
                    ]}
                    key={form.key("kind")}
                    {...form.getInputProps("kind")}
                  />
                </div>
                {values.kind === "job" && <JobFields form={form} />}
                <TextInput
                  label={t("launch.name")}
                  description={t("launch.nameHint")}
                  placeholder={values.instanceType ? `${values.instanceType}-…` : t("launch.optional")}
                  maxLength={63}
                  key={form.key("name")}
                  {...form.getInputProps("name")}
                />
                <Select
                  label={t("launch.instanceType")}
                  placeholder={types.isPending ? t("launch.loadingCatalog") : t("launch.chooseShape")}
                  data={typeOptions}
                  searchable
                  required
                  allowDeselect={false}
                  key={form.key("instanceType")}
                  {...form.getInputProps("instanceType")}
                  onChange={(name) => {
                    form.setFieldValue("instanceType", name ?? "");
                    const type = types.data?.find((t) => t.name === name);
                    if (type && sharesOneGpu(type)) form.setFieldValue("nodeCount", 1);
                  }}
                />
                <Group grow align="flex-start">
                  <NumberInput
                    label={t("launch.nodes")}
                    description={sharesGpu ? t("launch.sharedOneNode") : t("launch.nodesHint")}
                    disabled={sharesGpu}
                    min={1}
                    max={64}
                    allowDecimal={false}
                    required
                    key={form.key("nodeCount")}
                    {...form.getInputProps("nodeCount")}
                  />
                  <Select
                    label={t("launch.region")}
                    data={[
                      { value: ANY_REGION, label: t("launch.anyRegion") },
                      ...(regions.data ?? []).map((r) => ({ value: r.name, label: `${r.display_name} (${r.name})` })),
                    ]}
                    allowDeselect={false}
                    key={form.key("region")}
                    {...form.getInputProps("region")}
                  />
                </Group>
                <div>
                  <Text size="sm" fw={500} id="pricing-label">
                    {t("launch.pricing")}
                  </Text>
                  <SegmentedControl
                    aria-labelledby="pricing-label"
                    fullWidth
                    data={PRICING.map((p) => ({ value: p, label: words(p) }))}
                    key={form.key("pricingClass")}
                    {...form.getInputProps("pricingClass")}
                    onChange={(value) => {
                      const pricing = value as Schemas["PricingClass"];
                      form.setFieldValue("pricingClass", pricing);
                      // The API refuses spot at any other priority: the form never offers it.
                      if (pricing === "spot") form.setFieldValue("priorityClass", "preemptible");
                    }}
                  />
                  <Text size="xs" c="dimmed" mt={4}>
                    {t("launch.pricingHint")}
                  </Text>
                </div>
                {values.pricingClass === "reserved" && (
                  <Select
                    label={t("launch.reservation")}
                    description={t("launch.reservationHint")}
                    placeholder={reservations.data && live.length === 0 ? t("launch.noReservations") : undefined}
                    data={live.map((r) => ({
                      value: r.id,
                      label: t("launch.reservationOption", { name: r.name, count: r.count, type: r.instance_type, region: r.region, from: dateTime(r.starts_at), to: dateTime(r.ends_at) }),
                    }))}
                    required
                    key={form.key("reservationId")}
                    {...form.getInputProps("reservationId")}
                  />
                )}
                {values.pricingClass === "reserved" && reservations.data && live.length === 0 && (
                  <Text size="sm">
                    <AnchorLink to="/orgs/$orgId/reservations" params={{ orgId }} size="sm">
                      {t("launch.makeReservation")}
                    </AnchorLink>
                  </Text>
                )}
                <Group grow align="flex-start">
                  <Select
                    label={t("launch.priority")}
                    description={values.pricingClass === "spot" ? t("launch.spotPreemptible") : undefined}
                    disabled={values.pricingClass === "spot"}
                    data={PRIORITY.map((p) => ({ value: p, label: words(p) }))}
                    allowDeselect={false}
                    key={form.key("priorityClass")}
                    {...form.getInputProps("priorityClass")}
                  />
                  <Select
                    label={t("launch.workload")}
                    data={WORKLOAD.map((p) => ({ value: p, label: words(p) }))}
                    allowDeselect={false}
                    key={form.key("workloadClass")}
                    {...form.getInputProps("workloadClass")}
                  />
                </Group>
                <Autocomplete
                  label={t("launch.image")}
                  description={
                    imagePolicy.data?.length
                      ? t("launch.imageHintAllowed", { prefixes: imagePolicy.data.join(", ") })
                      : t("launch.imageHint")
                  }
                  placeholder={t("launch.defaultImage")}
                  data={(images.data ?? []).map((i) => i.name)}
                  key={form.key("image")}
                  {...form.getInputProps("image")}
                />
                {values.kind === "instance" && (
                  <Group grow align="flex-start">
                    <MultiSelect
                      label={t("launch.sshKeys")}
                      description={t("launch.sshKeysHint")}
                      placeholder={sshKeys.data?.length === 0 ? t("launch.sshKeysNone") : undefined}
                      data={(sshKeys.data ?? []).map((k) => ({ value: k.id, label: `${k.name} (${k.fingerprint.slice(0, 16)}…)` }))}
                      key={form.key("sshKeyIds")}
                      {...form.getInputProps("sshKeyIds")}
                    />
                    <TextInput
                      label={t("launch.ports")}
                      description={t("launch.portsHint")}
                      placeholder="8888"
                      key={form.key("ports")}
                      {...form.getInputProps("ports")}
                    />
                  </Group>
                )}
                <VolumeFields form={form} volumes={volumes.data ?? []} />
                <NumberInput
                  label={t("launch.duration")}
                  description={t("launch.durationHint")}
                  min={0}
                  step={0.5}
                  key={form.key("durationHours")}
                  {...form.getInputProps("durationHours")}
                />
                <Checkbox
                  label={t("launch.checkpointable")}
                  description={t("launch.checkpointableHint")}
                  key={form.key("checkpointable")}
                  {...form.getInputProps("checkpointable", { type: "checkbox" })}
                />
              </Stack>
            </Paper>
          </Grid.Col>
          <Grid.Col span={{ base: 12, md: 5 }}>
            <Stack>
              <Paper withBorder p="md" aria-label={t("launch.estimateAria")}>
                <Title order={4}>{t("launch.estimate")}</Title>
                {chosenReservation ? (
                  // Its reservation paid for these GPUs and holds them: no price, no queue.
                  <Text size="sm" data-testid="estimate-reserved">
                    {t("launch.paidByReservation", {
                      name: chosenReservation.name,
                      count: chosenReservation.count,
                      type: chosenReservation.instance_type,
                      to: dateTime(chosenReservation.ends_at),
                    })}
                  </Text>
                ) : cost ? (
                  <>
                    <Text size="xl" fw={700} data-testid="estimate-hourly">
                      {t("launch.perHour", { price: money(cost.hourlyMicros) })}
                    </Text>
                    <Text size="sm" c="dimmed">
                      {members > 1 && t("launch.jobsTimes", { count: members })}
                      {t("launch.shapeAt", { nodes: values.nodeCount, type: selected?.name, pricing: words(values.pricingClass) })}
                      {price?.region ? t("launch.inRegion", { region: price.region }) : ""}
                    </Text>
                    {cost.totalMicros !== null && (
                      <Text size="sm" mt="xs">
                        {t("launch.forDuration", { total: money(cost.totalMicros) })}
                      </Text>
                    )}
                    {selected && (
                      <Table mt="xs" aria-label={t("launch.roomByRegionAria")}>
                        <Table.Thead>
                          <Table.Tr>
                            <Table.Th>{t("launch.region")}</Table.Th>
                            <Table.Th ta="right">{sharesGpu ? t("launch.perInstanceHour") : t("launch.perGpuHour")}</Table.Th>
                            <Table.Th ta="right">{t("launch.startNow")}</Table.Th>
                          </Table.Tr>
                        </Table.Thead>
                        <Table.Tbody>
                          {(regions.data ?? []).map((r) => {
                            const inRegion = priceInForce(selected.prices, values.pricingClass, r.name);
                            return (
                              <Table.Tr key={r.name}>
                                <Table.Td>{r.display_name}</Table.Td>
                                <Table.Td ta="right">
                                  {inRegion ? money(sharesGpu ? inRegion.hourly_micros : perGpuHour(inRegion.hourly_micros, selected)) : "—"}
                                </Table.Td>
                                <Table.Td ta="right">
                                  <RoomNow
                                    room={availability.data?.regions.find((a) => a.region === r.name)}
                                    loaded={availability.isSuccess}
                                  />
                                </Table.Td>
                              </Table.Tr>
                            );
                          })}
                        </Table.Tbody>
                      </Table>
                    )}
                    {selected && (
                      <Text size="xs" c="dimmed" mt="xs">
                        {t("launch.startNowHint")}
                      </Text>
                    )}
                    {region === null && (
                      <Text size="xs" c="dimmed" mt="xs">
                        {t("launch.regionalPrices")}
                      </Text>
                    )}
                  </>
                ) : (
                  <Text size="sm" c="dimmed">
                    {selected ? t("launch.noPrice", { pricing: words(values.pricingClass) }) : t("launch.chooseType")}
                  </Text>
                )}
              </Paper>
              {quota && <QuotaNotice check={quota} model={selected?.gpu_model ?? ""} />}
              {submit.isError &&
                (submit.error instanceof ApiError && submit.error.fieldErrors.length > 0 && submit.error.fieldErrors.every((f) => fieldOf(f.field)) ? (
                  <Alert color="red" title={t("launch.refused")} role="alert">
                    {t("launch.fixFields")}
                  </Alert>
                ) : (
                  <ProblemAlert error={submit.error} title={t("launch.refused")} />
                ))}
              <Button type="submit" size="md" loading={submit.isPending} disabled={quota?.kind === "never"}>
                {values.kind === "job" ? t("launch.submitJob") : t("launch.launch")}
              </Button>
            </Stack>
          </Grid.Col>
        </Grid>
      </form>
    </>
  );
}

/** What a launch would meet in one region now: instances free, GPUs already queued. */
function RoomNow({ room, loaded }: { room: Schemas["RegionAvailability"] | undefined; loaded: boolean }) {
  if (!loaded) return "…";
  if (room === undefined) return t("launch.noneHere");
  // Types without GPUs are not counted ahead of placement: say so instead of a dash.
  if (room.instances_now === null || room.instances_now === undefined) return t("launch.notCounted");
  const free =
    room.instances_now > 0 ? (
      <Text span size="sm" fw={600}>
        {t("launch.freeNow", { count: room.instances_now })}
      </Text>
    ) : (
      <Text span size="sm">
        {t("launch.noneFree")}
      </Text>
    );
  return (
    <>
      {free}
      {room.waiting_gpus > 0 && (
        <Text span size="xs" c="dimmed" display="block">
          {t("launch.gpusQueued", { count: room.waiting_gpus })}
        </Text>
      )}
    </>
  );
}

/** A name a shell takes for a variable, as the API checks it. */
const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

const lines = (text: string) =>
  text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);

/** The names the environment field sets. */
function envNames(env: string): string[] {
  return lines(env).map((line) => line.slice(0, line.indexOf("=")));
}

/** The job section of the order body, from the form's text fields. */
export function jobOf(v: Values): Schemas["JobSpec"] {
  const dependencies = v.dependsOn
    .split(/[\s,]+/)
    .filter(Boolean)
    .map((id) => ({ order_id: id, condition: v.dependencyCondition }));
  return {
    command: v.command,
    args: lines(v.args),
    env: Object.fromEntries(
      lines(v.env).map((line) => {
        const at = line.indexOf("=");
        return [line.slice(0, at), line.slice(at + 1)];
      }),
    ),
    secret_env: Object.fromEntries(v.secrets.map((secret) => [secret.name, secret.value])),
    working_dir: v.workingDir.trim() || null,
    max_runtime_seconds: typeof v.walltimeMinutes === "number" ? Math.round(v.walltimeMinutes * 60) : null,
    retry: { on_failure: v.retryOnFailure, max_retries: typeof v.maxRetries === "number" ? v.maxRetries : 3 },
    depends_on: dependencies,
    array_count: typeof v.arrayCount === "number" ? v.arrayCount : null,
  };
}

function QuotaNotice({ check, model }: { check: QuotaCheck; model: string }) {
  switch (check.kind) {
    case "unlimited":
      return (
        <Alert color="gray" title={t("launch.quota")}>
          {t("launch.quotaNone", { model })}
        </Alert>
      );
    case "fits":
      return (
        <Alert color="green" title={t("launch.withinQuota")}>
          {t("launch.quotaFits", { after: check.after, max: check.max, model })}
        </Alert>
      );
    case "waits":
      return (
        <Alert color="yellow" title={t("launch.overQuota")}>
          {t("launch.quotaWaits", { used: check.used, max: check.max, model, more: check.after - check.used })}
        </Alert>
      );
    case "never":
      return (
        <Alert color="red" title={t("launch.tooLarge")}>
          {t("launch.quotaNever", { requested: check.requested, model, max: check.max })}
        </Alert>
      );
  }
}

import {
  Alert,
  Button,
  Grid,
  Group,
  MultiSelect,
  NumberInput,
  Paper,
  SegmentedControl,
  Select,
  Stack,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { useMemo } from "react";
import { JobFields } from "./JobFields";
import { api, ApiError, type Schemas, unwrap } from "../../api/client";
import { keys, useImages, useInstanceTypes, useQuotas, useRegions, useSshKeys } from "../../api/queries";
import { ProblemAlert } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { gpuShape } from "../../lib/capacity";
import { dateTime, money, words } from "../../lib/format";
import { liveReservations, useReservations } from "../../api/reservations";
import { useOrgId } from "../../lib/orgId";
import { estimate, priceInForce } from "../../lib/pricing";
import { checkQuota, type QuotaCheck } from "../../lib/quota";

const PRICING: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];
const PRIORITY: Schemas["PriorityClass"][] = ["standard", "production", "batch", "preemptible"];
const WORKLOAD: Schemas["WorkloadClass"][] = ["training", "fine_tuning", "inference", "dev", "batch", "hpo"];
const ANY_REGION = "";

export type Values = {
  kind: "instance" | "job";
  command: string;
  args: string;
  env: string;
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
  image: string;
  sshKeyIds: string[];
  ports: string;
  reservationId: string;
  name: string;
};

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
  const sshKeys = useSshKeys();
  const reservations = useReservations(orgId);
  const live = liveReservations(reservations.data);

  const form = useForm<Values>({
    initialValues: {
      kind: "instance",
      command: "",
      args: "",
      env: "",
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
      image: "",
      sshKeyIds: [],
      ports: "",
      reservationId: "",
      name: "",
    },
    validate: {
      name: (v) => (v === "" || /^[a-z0-9][a-z0-9-]{0,62}$/.test(v) ? null : "Lowercase letters, digits and hyphens, starting with a letter or digit"),
      command: (v, all) => (all.kind === "job" && !v.trim() ? "Enter the command the job runs" : null),
      env: (v) =>
        v
          .split("\n")
          .filter((line) => line.trim())
          .every((line) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(line))
          ? null
          : "One NAME=value per line",
      instanceType: (v) => (v ? null : "Choose an instance type"),
      nodeCount: (v) => (Number.isInteger(v) && v >= 1 && v <= 64 ? null : "1 to 64 nodes"),
      durationHours: (v) => (v === "" || (typeof v === "number" && v > 0) ? null : "A positive number of hours, or empty"),
      ports: (v) =>
        (portsOf(v) ?? []).every((p) => Number.isInteger(p) && p >= 1 && p <= 65535)
          ? null
          : "Port numbers, separated by commas",
      reservationId: (v, all) => (all.pricingClass === "reserved" && !v ? "Choose the reservation to run in" : null),
    },
  });
  const values = form.getValues();

  const selected = types.data?.find((t) => t.name === values.instanceType);
  const region = values.region || null;
  const durationSeconds = typeof values.durationHours === "number" ? Math.round(values.durationHours * 3600) : null;
  const price = selected ? priceInForce(selected.prices, values.pricingClass, region) : undefined;
  const members = values.kind === "job" && typeof values.arrayCount === "number" ? values.arrayCount : 1;
  const cost = estimate(price, values.nodeCount, durationSeconds, members);
  const requested = selected ? selected.gpus_per_node * values.nodeCount : 0;
  const quota = selected && quotas.data ? checkQuota(quotas.data, selected.gpu_model, region, requested) : null;

  const typeOptions = useMemo(() => {
    const byModel = new Map<string, { value: string; label: string }[]>();
    for (const t of types.data ?? []) {
      const items = byModel.get(t.gpu_model) ?? [];
      items.push({ value: t.name, label: `${t.name} — ${gpuShape(t)}, ${t.vcpus} vCPU, ${t.memory_gib} GiB` });
      byModel.set(t.gpu_model, items);
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
            job: v.kind === "job" ? jobOf(v) : null,
            image: v.image || null,
            ssh_key_ids: v.kind === "instance" && v.sshKeyIds.length ? v.sshKeyIds : null,
            ports: v.kind === "instance" ? portsOf(v.ports) : null,
            reservation_id: v.pricingClass === "reserved" ? v.reservationId : null,
          },
        }),
      ),
    onSuccess: (order) => {
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId) });
      void navigate({ to: "/orgs/$orgId/orders/$orderId", params: { orgId, orderId: order.id } });
    },
    onError: (error) => {
      if (error instanceof ApiError) {
        const fields: Record<string, keyof Values> = {
          name: "name",
          instance_type: "instanceType",
          node_count: "nodeCount",
          region: "region",
          duration_seconds: "durationHours",
          image: "image",
          ssh_key_ids: "sshKeyIds",
          ports: "ports",
          reservation_id: "reservationId",
        };
        for (const f of error.fieldErrors) {
          const field = fields[f.field.replace(/\[\d+\]$/, "")];
          if (field) form.setFieldError(field, f.message);
        }
      }
    },
  });

  return (
    <>
      <PageHeader
        title="Launch GPU capacity"
        subtitle="An instance you keep and log into, or a job that runs a command to completion; the price and your quota update as you go."
      />
      <form onSubmit={form.onSubmit((v) => submit.mutate(v))} noValidate>
        <Grid>
          <Grid.Col span={{ base: 12, md: 7 }}>
            <Paper withBorder p="md">
              <Stack>
                <div>
                  <Text size="sm" fw={500} id="kind-label">
                    What to launch
                  </Text>
                  <SegmentedControl
                    aria-labelledby="kind-label"
                    fullWidth
                    data={[
                      { value: "instance", label: "GPU instance" },
                      { value: "job", label: "Job (runs a command to completion)" },
                    ]}
                    key={form.key("kind")}
                    {...form.getInputProps("kind")}
                  />
                </div>
                {values.kind === "job" && <JobFields form={form} />}
                <TextInput
                  label="Name"
                  description="How it is listed; left empty, one is made up, such as h100x8-swift-otter."
                  placeholder={values.instanceType ? `${values.instanceType}-…` : "optional"}
                  maxLength={63}
                  key={form.key("name")}
                  {...form.getInputProps("name")}
                />
                <Select
                  label="Instance type"
                  placeholder={types.isPending ? "Loading the catalog…" : "Choose a GPU shape"}
                  data={typeOptions}
                  searchable
                  required
                  allowDeselect={false}
                  key={form.key("instanceType")}
                  {...form.getInputProps("instanceType")}
                />
                <Group grow align="flex-start">
                  <NumberInput
                    label="Nodes"
                    description="Several nodes run as one gang."
                    min={1}
                    max={64}
                    allowDecimal={false}
                    required
                    key={form.key("nodeCount")}
                    {...form.getInputProps("nodeCount")}
                  />
                  <Select
                    label="Region"
                    data={[
                      { value: ANY_REGION, label: "Any region" },
                      ...(regions.data ?? []).map((r) => ({ value: r.name, label: `${r.display_name} (${r.name})` })),
                    ]}
                    allowDeselect={false}
                    key={form.key("region")}
                    {...form.getInputProps("region")}
                  />
                </Group>
                <div>
                  <Text size="sm" fw={500} id="pricing-label">
                    Pricing
                  </Text>
                  <SegmentedControl
                    aria-labelledby="pricing-label"
                    fullWidth
                    data={PRICING.map((p) => ({ value: p, label: words(p) }))}
                    key={form.key("pricingClass")}
                    {...form.getInputProps("pricingClass")}
                  />
                  <Text size="xs" c="dimmed" mt={4}>
                    Spot is cheaper and may be preempted; reserved runs in one of your reservations, which pays for it.
                  </Text>
                </div>
                {values.pricingClass === "reserved" && (
                  <Select
                    label="Reservation"
                    description="It starts on the reservation's GPUs when its window opens, ahead of any queue, and stops when it ends."
                    placeholder={reservations.data && live.length === 0 ? "No upcoming or active reservations" : undefined}
                    data={live.map((r) => ({
                      value: r.id,
                      label: `${r.name} — ${r.count} × ${r.instance_type} in ${r.region}, ${dateTime(r.starts_at)} – ${dateTime(r.ends_at)}`,
                    }))}
                    required
                    key={form.key("reservationId")}
                    {...form.getInputProps("reservationId")}
                  />
                )}
                <Group grow align="flex-start">
                  <Select
                    label="Priority"
                    data={PRIORITY.map((p) => ({ value: p, label: words(p) }))}
                    allowDeselect={false}
                    key={form.key("priorityClass")}
                    {...form.getInputProps("priorityClass")}
                  />
                  <Select
                    label="Workload"
                    data={WORKLOAD.map((p) => ({ value: p, label: words(p) }))}
                    allowDeselect={false}
                    key={form.key("workloadClass")}
                    {...form.getInputProps("workloadClass")}
                  />
                </Group>
                <Select
                  label="Image"
                  description="What the workload's file system holds; the operator's default when none is chosen."
                  data={[
                    { value: "", label: "Default image" },
                    ...(images.data ?? []).map((i) => ({ value: i.name, label: `${i.name} — ${i.reference}` })),
                  ]}
                  allowDeselect={false}
                  key={form.key("image")}
                  {...form.getInputProps("image")}
                />
                {values.kind === "instance" && (
                  <Group grow align="flex-start">
                    <MultiSelect
                      label="SSH keys"
                      description="None chosen: all of your keys."
                      placeholder={sshKeys.data?.length === 0 ? "Add keys under Members & API keys" : undefined}
                      data={(sshKeys.data ?? []).map((k) => ({ value: k.id, label: `${k.name} (${k.fingerprint.slice(0, 16)}…)` }))}
                      key={form.key("sshKeyIds")}
                      {...form.getInputProps("sshKeyIds")}
                    />
                    <TextInput
                      label="Ports to expose"
                      description="Such as 8888 for Jupyter; each gets a node port."
                      placeholder="8888"
                      key={form.key("ports")}
                      {...form.getInputProps("ports")}
                    />
                  </Group>
                )}
                <NumberInput
                  label="Duration (hours)"
                  description="Optional: how long you expect to use it; helps the scheduler plan and prices the whole run."
                  min={0}
                  step={0.5}
                  key={form.key("durationHours")}
                  {...form.getInputProps("durationHours")}
                />
              </Stack>
            </Paper>
          </Grid.Col>
          <Grid.Col span={{ base: 12, md: 5 }}>
            <Stack>
              <Paper withBorder p="md" aria-label="Price estimate">
                <Title order={4}>Estimate</Title>
                {cost ? (
                  <>
                    <Text size="xl" fw={700} data-testid="estimate-hourly">
                      {money(cost.hourlyMicros)} / hour
                    </Text>
                    <Text size="sm" c="dimmed">
                      {members > 1 && `${members} jobs × `}
                      {values.nodeCount} × {selected?.name} at {words(values.pricingClass)}
                      {price?.region ? ` in ${price.region}` : ""}
                    </Text>
                    {cost.totalMicros !== null && (
                      <Text size="sm" mt="xs">
                        {money(cost.totalMicros)} for the planned duration
                      </Text>
                    )}
                    {region === null && (
                      <Text size="xs" c="dimmed" mt="xs">
                        Regional prices may differ; the region it starts in decides.
                      </Text>
                    )}
                  </>
                ) : (
                  <Text size="sm" c="dimmed">
                    {selected ? `No ${words(values.pricingClass)} price for this shape.` : "Choose an instance type."}
                  </Text>
                )}
              </Paper>
              {quota && <QuotaNotice check={quota} model={selected?.gpu_model ?? ""} />}
              {submit.isError && <ProblemAlert error={submit.error} title="The order was refused" />}
              <Button type="submit" size="md" loading={submit.isPending} disabled={quota?.kind === "never"}>
                {values.kind === "job" ? "Submit job" : "Launch"}
              </Button>
            </Stack>
          </Grid.Col>
        </Grid>
      </form>
    </>
  );
}

/** The job section of the order body, from the form's text fields. */
export function jobOf(v: Values): Schemas["JobSpec"] {
  const lines = (text: string) => text.split("\n").map((l) => l.trim()).filter(Boolean);
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
        <Alert color="gray" title="Quota">
          No {model} quota limits this organization.
        </Alert>
      );
    case "fits":
      return (
        <Alert color="green" title="Within quota">
          {check.after} of {check.max} {model} GPUs in use after this order.
        </Alert>
      );
    case "waits":
      return (
        <Alert color="yellow" title="Over quota for now">
          {check.used} of {check.max} {model} GPUs are in use; this order needs {check.after - check.used} more, so it
          waits until your other orders release GPUs or an operator raises the quota.
        </Alert>
      );
    case "never":
      return (
        <Alert color="red" title="Larger than your quota">
          This order needs {check.requested} {model} GPUs at once and your quota allows {check.max}. Ask an operator to
          raise it, or order fewer.
        </Alert>
      );
  }
}

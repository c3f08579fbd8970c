import { Checkbox, Group, NumberInput, Select, Stack, Textarea, TextInput } from "@mantine/core";
import type { UseFormReturnType } from "@mantine/form";
import type { Values } from "./Launch";

/** What a job runs, and its limits, retries, array and dependencies. */
export function JobFields({ form }: { form: UseFormReturnType<Values> }) {
  return (
    <Stack gap="sm">
      <Textarea
        label="Command"
        description="Run by sh -c on every node, with CUDA_VISIBLE_DEVICES set to its GPUs."
        placeholder="python train.py --config base.yaml"
        autosize
        minRows={2}
        required
        ff="monospace"
        key={form.key("command")}
        {...form.getInputProps("command")}
      />
      <Group grow align="flex-start">
        <Textarea
          label="Arguments"
          description="One per line, each passed as one word."
          autosize
          minRows={2}
          key={form.key("args")}
          {...form.getInputProps("args")}
        />
        <Textarea
          label="Environment"
          description="One NAME=value per line."
          autosize
          minRows={2}
          key={form.key("env")}
          {...form.getInputProps("env")}
        />
      </Group>
      <Group grow align="flex-start">
        <TextInput label="Working directory" placeholder="/workspace" key={form.key("workingDir")} {...form.getInputProps("workingDir")} />
        <NumberInput
          label="Walltime (minutes)"
          description="Stopped and marked timed out past it."
          min={1}
          key={form.key("walltimeMinutes")}
          {...form.getInputProps("walltimeMinutes")}
        />
      </Group>
      <Group grow align="flex-end">
        <NumberInput label="Retries" min={0} max={10} allowDecimal={false} key={form.key("maxRetries")} {...form.getInputProps("maxRetries")} />
        <Checkbox
          label="Also retry when the command fails"
          key={form.key("retryOnFailure")}
          {...form.getInputProps("retryOnFailure", { type: "checkbox" })}
        />
      </Group>
      <Group grow align="flex-start">
        <NumberInput
          label="Array size"
          description="Submit this many copies; each reads its index in GANTRY_ARRAY_INDEX."
          min={1}
          max={10000}
          allowDecimal={false}
          key={form.key("arrayCount")}
          {...form.getInputProps("arrayCount")}
        />
        <TextInput
          label="Runs after jobs"
          description="Job ids, separated by commas."
          key={form.key("dependsOn")}
          {...form.getInputProps("dependsOn")}
        />
        <Select
          label="Once they have"
          data={[
            { value: "after_ok", label: "completed successfully" },
            { value: "after_any", label: "ended, however" },
          ]}
          allowDeselect={false}
          key={form.key("dependencyCondition")}
          {...form.getInputProps("dependencyCondition")}
        />
      </Group>
    </Stack>
  );
}

import { ActionIcon, Button, Checkbox, Group, Input, NumberInput, PasswordInput, Select, Stack, Textarea, TextInput } from "@mantine/core";
import type { UseFormReturnType } from "@mantine/form";
import type { Values } from "./Launch";
import { t } from "../../i18n";

/** What a job runs, and its limits, retries, array and dependencies. */
export function JobFields({ form }: { form: UseFormReturnType<Values> }) {
  return (
    <Stack gap="sm">
      <Textarea
        label={t("jobFields.command")}
        description={t("jobFields.commandHint")}
        placeholder={t("jobFields.commandExample")}
        autosize
        minRows={2}
        required
        ff="monospace"
        key={form.key("command")}
        {...form.getInputProps("command")}
      />
      <Group grow align="flex-start">
        <Textarea
          label={t("jobFields.arguments")}
          description={t("jobFields.argumentsHint")}
          autosize
          minRows={2}
          key={form.key("args")}
          {...form.getInputProps("args")}
        />
        <Textarea
          label={t("jobFields.environment")}
          description={t("jobFields.environmentHint")}
          autosize
          minRows={2}
          key={form.key("env")}
          {...form.getInputProps("env")}
        />
      </Group>
      <SecretFields form={form} />
      <Group grow align="flex-start">
        <TextInput label={t("jobFields.workingDir")} placeholder={t("jobFields.workingDirExample")} key={form.key("workingDir")} {...form.getInputProps("workingDir")} />
        <NumberInput
          label={t("jobFields.walltime")}
          description={t("jobFields.walltimeHint")}
          min={1}
          key={form.key("walltimeMinutes")}
          {...form.getInputProps("walltimeMinutes")}
        />
      </Group>
      <Group grow align="flex-end">
        <NumberInput label={t("jobFields.retries")} min={0} max={10} allowDecimal={false} key={form.key("maxRetries")} {...form.getInputProps("maxRetries")} />
        <Checkbox
          label={t("jobFields.retryOnFailure")}
          key={form.key("retryOnFailure")}
          {...form.getInputProps("retryOnFailure", { type: "checkbox" })}
        />
      </Group>
      <Group grow align="flex-start">
        <NumberInput
          label={t("jobFields.arraySize")}
          description={t("jobFields.arraySizeHint")}
          min={1}
          max={10000}
          allowDecimal={false}
          key={form.key("arrayCount")}
          {...form.getInputProps("arrayCount")}
        />
        <TextInput
          label={t("jobFields.runsAfter")}
          description={t("jobFields.runsAfterHint")}
          key={form.key("dependsOn")}
          {...form.getInputProps("dependsOn")}
        />
        <Select
          label={t("jobFields.onceThey")}
          data={[
            { value: "after_ok", label: t("jobFields.afterOk") },
            { value: "after_any", label: t("jobFields.afterAny") },
          ]}
          allowDeselect={false}
          key={form.key("dependencyCondition")}
          {...form.getInputProps("dependencyCondition")}
        />
      </Group>
    </Stack>
  );
}

/** Secret variables: a name shown, a value typed once and never shown again. */
function SecretFields({ form }: { form: UseFormReturnType<Values> }) {
  const secrets = form.getValues().secrets;
  return (
    <Input.Wrapper label={t("jobFields.secrets")} description={t("jobFields.secretsHint")} error={form.errors.secrets}>
      <Stack gap="xs" mt={4}>
        {secrets.map((secret, i) => (
          <Group key={form.key(`secrets.${i}`)} align="flex-start" wrap="nowrap" gap="xs">
            <TextInput
              aria-label={t("jobFields.secretName", { n: i + 1 })}
              placeholder={t("jobFields.secretExample")}
              ff="monospace"
              style={{ flex: 1 }}
              autoComplete="off"
              key={form.key(`secrets.${i}.name`)}
              {...form.getInputProps(`secrets.${i}.name`)}
            />
            <PasswordInput
              aria-label={t("jobFields.secretValue", { name: secret.name || i + 1 })}
              style={{ flex: 2 }}
              autoComplete="new-password"
              key={form.key(`secrets.${i}.value`)}
              {...form.getInputProps(`secrets.${i}.value`)}
            />
            <ActionIcon
              variant="subtle"
              color="gray"
              size="lg"
              aria-label={t("jobFields.removeSecret", { name: secret.name || i + 1 })}
              onClick={() => form.removeListItem("secrets", i)}
            >
              ×
            </ActionIcon>
          </Group>
        ))}
        <Button variant="default" size="xs" w="fit-content" onClick={() => form.insertListItem("secrets", { name: "", value: "" })}>
          {t("jobFields.addSecret")}
        </Button>
      </Stack>
    </Input.Wrapper>
  );
}

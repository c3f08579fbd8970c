import { ActionIcon, Button, Checkbox, Group, Input, Select, Stack, TextInput } from "@mantine/core";
import type { UseFormReturnType } from "@mantine/form";
import type { Schemas } from "../../api/client";
import type { Values } from "./Launch";
import { words } from "../../lib/format";
import { t } from "../../i18n";

/** The most volumes one order attaches, as the API allows. */
const PER_ORDER_MAX = 8;

/** The organization's volumes an order attaches, each at a path of its own. */
export function VolumeFields({ form, volumes }: { form: UseFormReturnType<Values>; volumes: Schemas["Volume"][] }) {
  const attached = form.getValues().volumes;
  const options = volumes
    .filter((v) => v.status !== "deleting" && v.status !== "failed")
    .map((v) => ({ value: v.id, label: `${v.name} (${words(v.kind)}, ${v.region}, ${v.size_gib} GiB)` }));
  return (
    <Input.Wrapper label={t("launch.volumes")} description={t("launch.volumeHint")}>
      <Stack gap="xs" mt={4}>
        {attached.map((_, i) => (
          <Group key={form.key(`volumes.${i}`)} align="flex-start" wrap="nowrap" gap="xs">
            <Select
              aria-label={t("launch.volumeN", { n: i + 1 })}
              placeholder={t("launch.chooseVolume")}
              data={options}
              allowDeselect={false}
              style={{ flex: 2 }}
              key={form.key(`volumes.${i}.volumeId`)}
              {...form.getInputProps(`volumes.${i}.volumeId`)}
            />
            <TextInput
              aria-label={t("launch.mountPathN", { n: i + 1 })}
              placeholder={t("launch.mountPathHint")}
              ff="monospace"
              style={{ flex: 2 }}
              key={form.key(`volumes.${i}.mountPath`)}
              {...form.getInputProps(`volumes.${i}.mountPath`)}
            />
            <Checkbox
              label={t("launch.volumeReadOnly")}
              mt={8}
              key={form.key(`volumes.${i}.readOnly`)}
              {...form.getInputProps(`volumes.${i}.readOnly`, { type: "checkbox" })}
            />
            <ActionIcon
              variant="subtle"
              color="gray"
              size="lg"
              aria-label={t("launch.detachVolume", { n: i + 1 })}
              onClick={() => form.removeListItem("volumes", i)}
            >
              ×
            </ActionIcon>
          </Group>
        ))}
        {attached.length < PER_ORDER_MAX && (
          <Button
            variant="default"
            size="xs"
            w="fit-content"
            disabled={options.length === 0}
            onClick={() => form.insertListItem("volumes", { volumeId: "", mountPath: attached.length ? "" : "/data", readOnly: false })}
          >
            {t("launch.attachVolume")}
          </Button>
        )}
      </Stack>
    </Input.Wrapper>
  );
}

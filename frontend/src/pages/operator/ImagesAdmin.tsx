import { Badge, Button, Checkbox, Code, Group, Paper, Stack, Table, Text, Textarea, TextInput, Title } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect } from "react";
import { api, ApiError, unwrap } from "../../api/client";
import { keys, useImagePolicy, useImages } from "../../api/queries";
import { ConfirmButton } from "../../components/ConfirmButton";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { notifyError, notifySuccess } from "../../lib/notify";
import { t } from "../../i18n";

/** The catalog's images: curated OCI references that orders name by name, the default among them. */
export function ImagesTable() {
  const images = useImages();
  const queryClient = useQueryClient();
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.catalog("images") });
  const makeDefault = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.PATCH("/api/v1/admin/catalog/images/{image_id}", { params: { path: { image_id: id } }, body: { is_default: true } })),
    onSuccess: (image) => {
      notifySuccess(t("images.nowDefault", { name: image.name }));
      refresh();
    },
    onError: (error) => notifyError(error),
  });
  const remove = useMutation({
    mutationFn: (id: string) => unwrap(api.DELETE("/api/v1/admin/catalog/images/{image_id}", { params: { path: { image_id: id } } })),
    onSuccess: refresh,
    onError: (error) => notifyError(error),
  });
  return (
    <Loadable query={images}>
      {(list) => (
        <Paper withBorder>
          <Table aria-label={t("images.tableAria")}>
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t("images.image")}</Table.Th>
                <Table.Th>{t("images.reference")}</Table.Th>
                <Table.Th />
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {list.length === 0 && (
                <Table.Tr>
                  <Table.Td colSpan={3}>
                    <Text size="sm" c="dimmed">
                      {t("images.none")}
                    </Text>
                  </Table.Td>
                </Table.Tr>
              )}
              {list.map((image) => (
                <Table.Tr key={image.id}>
                  <Table.Td>
                    <Group gap="xs">
                      <Text size="sm">{image.name}</Text>
                      {image.is_default && (
                        <Badge size="sm" color="indigo.2">
                          {t("images.default")}
                        </Badge>
                      )}
                    </Group>
                    <Text size="xs" c="dimmed">
                      {image.description}
                    </Text>
                  </Table.Td>
                  <Table.Td>
                    <Code>{image.reference}</Code>
                  </Table.Td>
                  <Table.Td>
                    <Group gap="xs" wrap="nowrap">
                      {!image.is_default && (
                        <Button size="xs" variant="default" onClick={() => makeDefault.mutate(image.id)}>
                          {t("images.makeDefault")}
                        </Button>
                      )}
                      <ConfirmButton
                        size="xs"
                        label={t("images.delete")}
                        title={t("images.deleteTitle", { name: image.name })}
                        message={t("images.deleteBody")}
                        confirmLabel={t("images.delete")}
                        onConfirm={() => remove.mutate(image.id)}
                      />
                    </Group>
                  </Table.Td>
                </Table.Tr>
              ))}
            </Table.Tbody>
          </Table>
        </Paper>
      )}
    </Loadable>
  );
}

export function NewImage() {
  const queryClient = useQueryClient();
  const form = useForm({
    initialValues: { name: "", reference: "", description: "", is_default: false },
    validate: {
      name: (v) => (/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(v) ? null : t("images.nameFormat")),
      reference: (v) => (v.trim() && !/\s/.test(v) ? null : t("images.referenceFormat")),
    },
  });
  const create = useMutation({
    mutationFn: (body: typeof form.values) => unwrap(api.POST("/api/v1/admin/catalog/images", { body })),
    onSuccess: (image) => {
      notifySuccess(t("images.added", { name: image.name }));
      form.reset();
      void queryClient.invalidateQueries({ queryKey: keys.catalog("images") });
    },
  });
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("images.newImage")}
      </Title>
      <form onSubmit={form.onSubmit((v) => create.mutate(v))} noValidate>
        <Stack gap="xs">
          <TextInput label={t("images.name")} placeholder={t("images.nameExample")} required {...form.getInputProps("name")} />
          <TextInput label={t("images.oci")} placeholder={t("images.ociExample")} required {...form.getInputProps("reference")} />
          <TextInput label={t("images.description")} {...form.getInputProps("description")} />
          <Checkbox label={t("images.isDefault")} {...form.getInputProps("is_default", { type: "checkbox" })} />
          {create.isError && <ProblemAlert error={create.error} title={t("images.refused")} />}
          <Button type="submit" loading={create.isPending}>
            {t("images.add")}
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

/** The registries and repositories orders may name images from, beside the catalog's, one per line. */
export function ImagePolicy() {
  const queryClient = useQueryClient();
  const policy = useImagePolicy();
  const form = useForm({ initialValues: { prefixes: "" } });
  const { setValues, resetDirty, isDirty } = form;
  // The saved list fills the field once it loads, unless someone is typing.
  useEffect(() => {
    if (policy.data && !isDirty()) {
      const text = policy.data.join("\n");
      setValues({ prefixes: text });
      resetDirty({ prefixes: text });
    }
  }, [policy.data, setValues, resetDirty, isDirty]);
  const save = useMutation({
    mutationFn: (prefixes: string[]) =>
      unwrap(api.PUT("/api/v1/admin/catalog/image-policy", { body: { allowed_prefixes: prefixes } })),
    onSuccess: (saved) => {
      notifySuccess(t("images.policySaved", { count: saved.allowed_prefixes.length }));
      void queryClient.invalidateQueries({ queryKey: keys.catalog("image-policy") });
    },
    onError: (error) => {
      if (error instanceof ApiError && error.fieldErrors.length) {
        form.setFieldError("prefixes", error.fieldErrors.map((f) => f.message).join("; "));
      }
    },
  });
  const lines = (text: string) =>
    text
      .split("\n")
      .map((l) => l.trim())
      .filter(Boolean);
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("images.policy")}
      </Title>
      <form onSubmit={form.onSubmit((v) => save.mutate(lines(v.prefixes)))} noValidate>
        <Stack gap="xs">
          <Textarea
            label={t("images.allowedPrefixes")}
            description={t("images.allowedPrefixesHint")}
            placeholder={t("images.allowedPrefixesExample")}
            autosize
            minRows={3}
            {...form.getInputProps("prefixes")}
          />
          {save.isError && !(save.error instanceof ApiError && save.error.fieldErrors.length) && (
            <ProblemAlert error={save.error} title={t("images.policyRefused")} />
          )}
          <Button type="submit" loading={save.isPending}>
            {t("images.savePolicy")}
          </Button>
        </Stack>
      </form>
    </Paper>
  );
}

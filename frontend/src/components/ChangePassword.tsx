import { Alert, Button, Group, Modal, PasswordInput, Stack } from "@mantine/core";
import { useForm } from "@mantine/form";
import { useMutation } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ApiError, unwrap } from "../api/client";
import { session } from "../api/session";
import { notifySuccess } from "../lib/notify";

type Values = { current: string; next: string; again: string };

/**
 * The signed-in user's new password. The server then ends every session of
 * the user, this one too, so the console signs out and asks for it.
 */
export function ChangePassword({ opened, onClose }: { opened: boolean; onClose: () => void }) {
  const { t } = useTranslation();
  const form = useForm<Values>({
    initialValues: { current: "", next: "", again: "" },
    validate: {
      current: (v) => (v ? null : t("password.currentRequired")),
      next: (v, all) => (v.length < 10 ? t("password.tooShort") : v === all.current ? t("password.same") : null),
      again: (v, all) => (v === all.next ? null : t("password.mismatch")),
    },
  });
  const change = useMutation({
    mutationFn: (v: Values) => unwrap(api.POST("/api/v1/me/password", { body: { current_password: v.current, new_password: v.next } })),
    onSuccess: () => {
      notifySuccess(t("password.changed"));
      void session.signOut();
    },
    onError: (error) => {
      if (!(error instanceof ApiError)) return;
      if (error.code === "wrong_password") form.setFieldError("current", t("password.wrong"));
      for (const f of error.fieldErrors) if (f.field === "new_password") form.setFieldError("next", f.message);
    },
  });
  const close = () => {
    form.reset();
    change.reset();
    onClose();
  };
  const error = change.error;
  // What no field explains (a lost connection, a server fault) goes in an alert.
  const unexplained = error && !(error instanceof ApiError && (error.code === "wrong_password" || error.fieldErrors.length > 0));
  return (
    <Modal opened={opened} onClose={close} title={t("password.title")} centered closeButtonProps={{ "aria-label": t("common.close") }}>
      <form onSubmit={form.onSubmit((v) => change.mutate(v))}>
        <Stack gap="sm">
          <PasswordInput label={t("password.current")} autoComplete="current-password" key={form.key("current")} {...form.getInputProps("current")} />
          <PasswordInput
            label={t("password.new")}
            description={t("password.newHint")}
            autoComplete="new-password"
            key={form.key("next")}
            {...form.getInputProps("next")}
          />
          <PasswordInput label={t("password.again")} autoComplete="new-password" key={form.key("again")} {...form.getInputProps("again")} />
          {unexplained && (
            <Alert color="red" role="alert">
              {error.message}
            </Alert>
          )}
          <Group justify="flex-end">
            <Button variant="default" onClick={close}>
              {t("common.keepIt")}
            </Button>
            <Button type="submit" loading={change.isPending}>
              {t("password.submit")}
            </Button>
          </Group>
        </Stack>
      </form>
    </Modal>
  );
}

import { Button, type ButtonProps, Group, Modal, Text } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import type { ReactNode } from "react";
import { useTranslation } from "react-i18next";

/**
 * An action behind a confirmation that says what will happen: destructive
 * (red) unless `tone` names another colour, as for a charge.
 */
export function ConfirmButton({
  label,
  title,
  message,
  confirmLabel,
  onConfirm,
  loading,
  tone = "red",
  ...button
}: ButtonProps & {
  label: string;
  title: string;
  message: ReactNode;
  confirmLabel: string;
  onConfirm: () => void;
  tone?: string;
}) {
  const [opened, { open, close }] = useDisclosure(false);
  const { t } = useTranslation();
  return (
    <>
      <Button color={tone} variant="light" onClick={open} loading={loading} {...button}>
        {label}
      </Button>
      <Modal opened={opened} onClose={close} title={title} centered closeButtonProps={{ "aria-label": t("common.close") }}>
        {typeof message === "string" ? <Text size="sm">{message}</Text> : message}
        <Group justify="flex-end" mt="lg">
          <Button variant="default" onClick={close}>
            {t("common.keepIt")}
          </Button>
          {/* A darker shade than the trigger's, so white on it meets AA contrast. */}
          <Button
            color={`${tone}.8`}
            onClick={() => {
              close();
              onConfirm();
            }}
          >
            {confirmLabel}
          </Button>
        </Group>
      </Modal>
    </>
  );
}

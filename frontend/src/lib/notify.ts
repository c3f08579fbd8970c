import { notifications } from "@mantine/notifications";
import { messageOf } from "../api/client";
import { i18n } from "../i18n";

// Mantine's close button is an icon alone: it needs a name for screen readers.
const closeButtonProps = () => ({ "aria-label": i18n.t("shape.dismiss") });

export function notifySuccess(message: string) {
  notifications.show({ color: "green", message, closeButtonProps: closeButtonProps() });
}

export function notifyError(error: unknown, title = i18n.t("shape.refused")) {
  notifications.show({ color: "red", title, message: messageOf(error), closeButtonProps: closeButtonProps() });
}

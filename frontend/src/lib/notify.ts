import { notifications } from "@mantine/notifications";
import { messageOf } from "../api/client";

// Mantine's close button is an icon alone: it needs a name for screen readers.
const closeButtonProps = { "aria-label": "Dismiss" };

export function notifySuccess(message: string) {
  notifications.show({ color: "green", message, closeButtonProps });
}

export function notifyError(error: unknown, title = "The request was refused") {
  notifications.show({ color: "red", title, message: messageOf(error), closeButtonProps });
}

import { notifications } from "@mantine/notifications";
import { messageOf } from "../api/client";

export function notifySuccess(message: string) {
  notifications.show({ color: "green", message });
}

export function notifyError(error: unknown, title = "The request was refused") {
  notifications.show({ color: "red", title, message: messageOf(error) });
}

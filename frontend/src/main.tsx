import "@mantine/core/styles.css";
import "@mantine/notifications/styles.css";
import "./styles.css";
import "./i18n";
import { MantineProvider } from "@mantine/core";
import { Notifications } from "@mantine/notifications";
import { QueryClientProvider } from "@tanstack/react-query";
import { RouterProvider } from "@tanstack/react-router";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { useTranslation } from "react-i18next";
import { usePreferences } from "./lib/preferences";
import { queryClient } from "./queryClient";
import { router } from "./router";
import { theme } from "./theme";

/** Pages render again in a new language or time zone. */
function Console() {
  const { i18n } = useTranslation();
  const { timeZone } = usePreferences();
  return <RouterProvider key={`${i18n.language} ${timeZone ?? ""}`} router={router} />;
}

const root = document.getElementById("root");
if (root) {
  createRoot(root).render(
    <StrictMode>
      <MantineProvider theme={theme} defaultColorScheme="auto">
        <Notifications position="top-right" />
        <QueryClientProvider client={queryClient}>
          <Console />
        </QueryClientProvider>
      </MantineProvider>
    </StrictMode>,
  );
}

import { Button, Center, Group, Paper, Stack, Text, Title } from "@mantine/core";
import { useEffect, type ReactNode } from "react";
import { useTranslation } from "react-i18next";
import { chooseLanguage, LANGUAGES, type Language } from "../i18n";

export function AuthFrame({ title, children, footer }: { title: string; children: ReactNode; footer: ReactNode }) {
  const { t, i18n } = useTranslation();
  useEffect(() => {
    document.title = `${title} · Gantry`;
  }, [title]);
  return (
    <Center mih="100vh" p="md" component="main">
      <Paper withBorder shadow="sm" p="xl" radius="md" w="100%" maw={420}>
        <Stack gap="md">
          <div>
            <Text fw={700} c="indigo">
              {t("common.appName")}
            </Text>
            <Title order={2}>{title}</Title>
          </div>
          {children}
          <Text size="sm" c="dimmed">
            {footer}
          </Text>
          <Group gap="xs" justify="flex-end">
            {(Object.entries(LANGUAGES) as [Language, string][]).map(([code, name]) => (
              <Button
                key={code}
                lang={code}
                size="compact-xs"
                variant={code === i18n.language ? "light" : "subtle"}
                aria-pressed={code === i18n.language}
                onClick={() => chooseLanguage(code)}
              >
                {name}
              </Button>
            ))}
          </Group>
        </Stack>
      </Paper>
    </Center>
  );
}

import { Center, Paper, Stack, Text, Title } from "@mantine/core";
import { useEffect, type ReactNode } from "react";

export function AuthFrame({ title, children, footer }: { title: string; children: ReactNode; footer: ReactNode }) {
  useEffect(() => {
    document.title = `${title} · Gantry`;
  }, [title]);
  return (
    <Center mih="100vh" p="md" component="main">
      <Paper withBorder shadow="sm" p="xl" radius="md" w="100%" maw={420}>
        <Stack gap="md">
          <div>
            <Text fw={700} c="indigo">
              Gantry
            </Text>
            <Title order={2}>{title}</Title>
          </div>
          {children}
          <Text size="sm" c="dimmed">
            {footer}
          </Text>
        </Stack>
      </Paper>
    </Center>
  );
}

import { Stack, Text, Title } from "@mantine/core";

import { ButtonLink } from "./links";
import { useTranslation } from "react-i18next";

export function NotFound() {
  const { t } = useTranslation();
  return (
    <Stack align="center" mt="xl">
      <Title order={2}>{t("common.notFoundTitle")}</Title>
      <Text c="dimmed">{t("common.notFoundBody")}</Text>
      <ButtonLink to="/">{t("common.goToConsole")}</ButtonLink>
    </Stack>
  );
}

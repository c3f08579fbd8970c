import { Stack, Text, Title } from "@mantine/core";

import { ButtonLink } from "./links";

export function NotFound() {
  return (
    <Stack align="center" mt="xl">
      <Title order={2}>Page not found</Title>
      <Text c="dimmed">There is no console page at this address.</Text>
      <ButtonLink to="/">
        Go to the console
      </ButtonLink>
    </Stack>
  );
}

import { Button, Group } from "@mantine/core";
import type { UseInfiniteQueryResult } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";

/** The next page of a cursor-paged list, when there is one. */
export function LoadMore({ query }: { query: Pick<UseInfiniteQueryResult, "hasNextPage" | "fetchNextPage" | "isFetchingNextPage"> }) {
  const { t } = useTranslation();
  if (!query.hasNextPage) return null;
  return (
    <Group justify="center" p="sm">
      <Button variant="subtle" onClick={() => void query.fetchNextPage()} loading={query.isFetchingNextPage}>
        {t("common.loadMore")}
      </Button>
    </Group>
  );
}

import { Button, Group } from "@mantine/core";
import type { UseInfiniteQueryResult } from "@tanstack/react-query";

/** The next page of a cursor-paged list, when there is one. */
export function LoadMore({ query }: { query: Pick<UseInfiniteQueryResult, "hasNextPage" | "fetchNextPage" | "isFetchingNextPage"> }) {
  if (!query.hasNextPage) return null;
  return (
    <Group justify="center" p="sm">
      <Button variant="subtle" onClick={() => void query.fetchNextPage()} loading={query.isFetchingNextPage}>
        Load more
      </Button>
    </Group>
  );
}

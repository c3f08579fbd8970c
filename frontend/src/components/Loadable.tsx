import { Alert, Center, Loader } from "@mantine/core";
import type { UseQueryResult } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { ApiError, messageOf } from "../api/client";
import { i18n } from "../i18n";

/** A query's loading spinner, its error as the server put it, or its data. */
export function Loadable<T>({ query, children }: { query: UseQueryResult<T>; children: (data: T) => ReactNode }) {
  if (query.isPending) {
    return (
      <Center p="xl">
        <Loader aria-label={i18n.t("common.loading")} />
      </Center>
    );
  }
  if (query.isError) return <ProblemAlert error={query.error} />;
  return <>{children(query.data)}</>;
}

export function ProblemAlert({ error, title }: { error: unknown; title?: string }) {
  // Another organization's id, or one that is gone, is not found: not a fault.
  const missing = error instanceof ApiError && error.status === 404;
  return (
    <Alert color="red" title={title ?? i18n.t(missing ? "common.notFound" : "common.somethingWrong")} role="alert">
      {messageOf(error)}
    </Alert>
  );
}

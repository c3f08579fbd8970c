// A page only some roles may use: others read why, and whom to ask,
// instead of the API's refusal.
import { Alert, Center, Loader } from "@mantine/core";
import type { ReactNode } from "react";
import { type Abilities, useAbilities, useOrgId } from "../lib/orgId";
import { PageHeader } from "./PageHeader";
import { t } from "../i18n";

type Ability = "order" | "billing";

export function NeedsRole({ ability, children }: { ability: Ability; children: ReactNode }) {
  const can: Abilities = useAbilities(useOrgId());
  if (!can.known) {
    return (
      <Center p="xl">
        <Loader aria-label={t("common.loading")} />
      </Center>
    );
  }
  if (can[ability]) return <>{children}</>;
  return (
    <>
      <PageHeader title={t(ability === "order" ? "roles.orderTitle" : "roles.billingTitle")} />
      <Alert color="blue" variant="light" data-testid="read-only">
        {t(ability === "order" ? "roles.orderBody" : "roles.billingBody", { role: can.role ? t(`enum.${can.role}`) : "" })}
      </Alert>
    </>
  );
}

import { Navigate } from "@tanstack/react-router";
import { useMe } from "../api/queries";
import { Loadable } from "../components/Loadable";
import { lastOrg } from "../lib/lastOrg";
import { EmptyState } from "../components/EmptyState";
import { useTranslation } from "react-i18next";

/** `/` opens the organization last worked in, or the operator's map. */
export function HomeRedirect() {
  const me = useMe();
  const { t } = useTranslation();
  return (
    <Loadable query={me}>
      {(data) => {
        const orgs = data.memberships.map((m) => m.organization.id);
        const remembered = lastOrg();
        const target = remembered && orgs.includes(remembered) ? remembered : orgs[0];
        if (target) return <Navigate to="/orgs/$orgId" params={{ orgId: target }} replace />;
        if (data.user?.is_operator) return <Navigate to="/admin/capacity" replace />;
        return (
          <EmptyState title={t("common.noOrganizationTitle")}>{t("common.noOrganizationBody")}</EmptyState>
        );
      }}
    </Loadable>
  );
}

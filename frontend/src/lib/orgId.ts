import { useParams } from "@tanstack/react-router";
import type { Schemas } from "../api/client";
import { useMe } from "../api/queries";

/** The organization of the page being shown (`/orgs/$orgId/...`). */
export function useOrgId(): string {
  const { orgId } = useParams({ strict: false });
  if (!orgId) throw new Error("this page belongs to an organization");
  return orgId;
}

/**
 * Whether the signed-in user sees this organization as a platform operator
 * who is not a member: the API lets them read it and change nothing, so the
 * console hides what would change it.
 */
export function useOperatorView(orgId: string | undefined): boolean {
  const me = useMe();
  if (!orgId || !me.data?.user?.is_operator) return false;
  return !me.data.memberships.some((m) => m.organization.id === orgId);
}

type Role = Schemas["OrgRole"];

/**
 * What the signed-in user may do in an organization, as the API decides it
 * by role: pages show only that, so nothing offered is refused. An
 * operator viewing a tenant reads everything and changes nothing.
 */
export type Abilities = {
  /** Whether the user's memberships are loaded: until then nothing is allowed. */
  known: boolean;
  role: Role | null;
  /** Launch, cancel and reserve: owner, admin, member. */
  order: boolean;
  /** Members, API keys, webhooks, registry logins, projects: owner, admin. */
  manage: boolean;
  /** Usage, spend, balance, invoices and SLA reports: owner, admin, billing. */
  billing: boolean;
};

export function abilitiesOf(role: Role | null, operatorView: boolean, known = true): Abilities {
  const is = (...roles: Role[]) => role !== null && roles.includes(role);
  return {
    known,
    role,
    order: is("owner", "admin", "member"),
    manage: is("owner", "admin"),
    billing: operatorView || is("owner", "admin", "billing"),
  };
}

export function useAbilities(orgId: string | undefined): Abilities {
  const me = useMe();
  const viewing = useOperatorView(orgId);
  const role = me.data?.memberships.find((m) => m.organization.id === orgId)?.role ?? null;
  return abilitiesOf(role, viewing, me.isSuccess);
}

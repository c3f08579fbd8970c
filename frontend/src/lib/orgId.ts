import { useParams } from "@tanstack/react-router";
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

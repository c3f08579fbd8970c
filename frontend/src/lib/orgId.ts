import { useParams } from "@tanstack/react-router";

/** The organization of the page being shown (`/orgs/$orgId/...`). */
export function useOrgId(): string {
  const { orgId } = useParams({ strict: false });
  if (!orgId) throw new Error("this page belongs to an organization");
  return orgId;
}

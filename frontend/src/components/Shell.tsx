// The frame around every signed-in page: header with organization switcher
// and account menu, navigation for tenants and (to operators only) the
// operator area.
import { Alert, AppShell, Burger, Group, Menu, NavLink, type NavLinkProps, ScrollArea, Select, Text, UnstyledButton } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { useQueryClient } from "@tanstack/react-query";
import { createLink, Outlet, useLocation, useNavigate, useParams, useRouter } from "@tanstack/react-router";
import { type ComponentPropsWithRef, useEffect } from "react";
import { useMe, useOrgNames } from "../api/queries";
import { useOperatorView } from "../lib/orgId";
import { AnchorLink } from "./links";
import { safeNext, session, useSession } from "../api/session";
import { rememberOrg } from "../lib/lastOrg";

// Filled when active: the light variant's tinted text misses AA contrast.
const NavAnchor = (props: NavLinkProps & ComponentPropsWithRef<"a">) => <NavLink component="a" variant="filled" {...props} />;
const RouterNavLink = createLink(NavAnchor);

export function Shell() {
  const [opened, { toggle, close }] = useDisclosure();
  const { state, expired } = useSession();
  const navigate = useNavigate();
  const router = useRouter();
  const location = useLocation();
  const queryClient = useQueryClient();
  const me = useMe();
  // Operator pages name organizations too (`/admin/orgs/$orgId`): only a
  // tenant page is in one.
  const { orgId: routeOrg } = useParams({ strict: false });
  const orgId = location.pathname.startsWith("/orgs/") ? routeOrg : undefined;

  useEffect(() => {
    // Once on its way to sign-in, the location is the sign-in page's own:
    // going there again would lose where the user was.
    if (!state && !location.pathname.startsWith("/sign-")) {
      queryClient.clear();
      const next = expired ? safeNext(location.href) : undefined;
      void navigate({ to: "/sign-in", search: next ? { next } : {} });
    }
  }, [state, expired, navigate, queryClient, location.href, location.pathname]);

  useEffect(() => {
    if (orgId) rememberOrg(orgId);
  }, [orgId]);

  // Close the mobile navigation after a move.
  useEffect(() => close(), [location.pathname, close]);

  const memberships = me.data?.memberships ?? [];
  const operator = me.data?.user?.is_operator ?? false;
  const currentOrg = orgId ?? memberships[0]?.organization.id;
  const viewing = useOperatorView(orgId);
  const orgNames = useOrgNames(viewing);

  const switchOrg = (next: string | null) => {
    if (!next || next === currentOrg) return;
    const path = orgId ? location.pathname.replace(`/orgs/${orgId}`, `/orgs/${next}`) : `/orgs/${next}`;
    // Detail pages belong to the organization being left.
    const landing = path.replace(/\/(orders|invoices)\/[^/]+$/, "/$1");
    router.history.push(landing);
  };

  return (
    <AppShell
      header={{ height: 56 }}
      navbar={{ width: 232, breakpoint: "sm", collapsed: { mobile: !opened } }}
      padding="md"
    >
      <AppShell.Header>
        <Group h="100%" px="md" justify="space-between" wrap="nowrap">
          <Group gap="sm" wrap="nowrap" miw={0}>
            <Burger opened={opened} onClick={toggle} hiddenFrom="sm" size="sm" aria-label="Toggle navigation" />
            <Text fw={700} size="lg">
              Gantry
            </Text>
            {memberships.length > 0 && !viewing && (
              <Select
                aria-label="Organization"
                size="xs"
                w={{ base: 150, sm: 220 }}
                data={memberships.map((m) => ({ value: m.organization.id, label: m.organization.name }))}
                value={currentOrg ?? null}
                onChange={switchOrg}
                allowDeselect={false}
              />
            )}
          </Group>
          <Menu position="bottom-end" withinPortal>
            <Menu.Target>
              <UnstyledButton aria-label="Account" style={{ flexShrink: 0 }}>
                <Text size="sm" visibleFrom="sm">
                  {me.data?.user?.email ?? "Account"}
                </Text>
                <Text size="sm" hiddenFrom="sm">
                  Account
                </Text>
              </UnstyledButton>
            </Menu.Target>
            <Menu.Dropdown>
              {operator && <Menu.Label>Platform operator</Menu.Label>}
              <Menu.Item onClick={() => void session.signOut()}>Sign out</Menu.Item>
            </Menu.Dropdown>
          </Menu>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs" aria-label="Main">
        <ScrollArea>
          {currentOrg && (
            <>
              <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="xs">
                Organization
              </Text>
              <RouterNavLink label="Overview" to="/orgs/$orgId" params={{ orgId: currentOrg }} activeOptions={{ exact: true }} activeProps={{ active: true }} />
              {!viewing && <RouterNavLink label="Launch" to="/orgs/$orgId/launch" params={{ orgId: currentOrg }} activeProps={{ active: true }} />}
              <RouterNavLink label="Orders" to="/orgs/$orgId/orders" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label="Reservations" to="/orgs/$orgId/reservations" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label="Usage" to="/orgs/$orgId/usage" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label="Invoices" to="/orgs/$orgId/invoices" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label="SLA" to="/orgs/$orgId/sla" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label="Members & API keys" to="/orgs/$orgId/settings" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
            </>
          )}
          <RouterNavLink label="Catalog & prices" to="/catalog" activeProps={{ active: true }} />
          {operator && (
            <>
              <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="md">
                Operator
              </Text>
              <RouterNavLink label="Capacity map" to="/admin/capacity" activeProps={{ active: true }} />
              <RouterNavLink label="Reservation calendar" to="/admin/calendar" activeProps={{ active: true }} />
              <RouterNavLink label="Queues" to="/admin/queues" activeProps={{ active: true }} />
              <RouterNavLink label="Organizations & quotas" to="/admin/orgs" activeProps={{ active: true }} />
              <RouterNavLink label="Nodes" to="/admin/nodes" activeProps={{ active: true }} />
              <RouterNavLink label="Edit catalog & prices" to="/admin/catalog" activeProps={{ active: true }} />
              <RouterNavLink label="SLA reports" to="/admin/sla" activeProps={{ active: true }} />
              <RouterNavLink label="Audit log" to="/admin/audit" activeProps={{ active: true }} />
            </>
          )}
          <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="md">
            Developers
          </Text>
          <RouterNavLink label="API reference" to="/api-reference" activeProps={{ active: true }} />
        </ScrollArea>
      </AppShell.Navbar>
      <AppShell.Main>
        {viewing && orgId && (
          <Alert color="blue" variant="light" mb="md" data-testid="operator-view" title="Read-only operator view">
            You see {orgNames.data?.get(orgId) ?? "this organization"} as its members do, and cannot change it here.{" "}
            <AnchorLink to="/admin/orgs/$orgId" params={{ orgId }} size="sm" c="inherit" underline="always" fw={600}>
              Its quotas and terms
            </AnchorLink>
          </Alert>
        )}
        <Outlet />
      </AppShell.Main>
    </AppShell>
  );
}

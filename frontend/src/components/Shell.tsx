// The frame around every signed-in page: header with organization switcher
// and account menu (language, time zone, sign-out), navigation for tenants
// and (to operators only) the operator area.
import { Alert, AppShell, Burger, Center, Group, Loader, Menu, NavLink, type NavLinkProps, ScrollArea, Select, Text, UnstyledButton } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { createLink, Outlet, useLocation, useNavigate, useParams, useRouter, useSearch } from "@tanstack/react-router";
import { type ComponentPropsWithRef, useEffect, useMemo } from "react";
import { useTranslation } from "react-i18next";
import { api, unwrap } from "../api/client";
import { keys, useMe, useOrgNames } from "../api/queries";
import { safeNext, session, useSession } from "../api/session";
import { chooseLanguage, isLanguage, LANGUAGES, type Language } from "../i18n";
import { rememberOrg } from "../lib/lastOrg";
import { useAbilities, useOperatorView } from "../lib/orgId";
import { preferences, setPreferences } from "../lib/preferences";
import { notifyError } from "../lib/notify";
import { zoneLabel } from "../lib/zone";
import { AnchorLink } from "./links";
import { ChangePassword } from "./ChangePassword";

// Filled when active: the light variant's tinted text misses AA contrast.
const NavAnchor = (props: NavLinkProps & ComponentPropsWithRef<"a">) => <NavLink component="a" variant="filled" {...props} />;
const RouterNavLink = createLink(NavAnchor);

const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

export function Shell() {
  const { t, i18n } = useTranslation();
  const [opened, { toggle, close }] = useDisclosure();
  const [passwordOpened, { open: openPassword, close: closePassword }] = useDisclosure();
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
  const { tab: settingsTab } = useSearch({ strict: false }) as { tab?: string };

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

  // What the user chose on their account wins over this browser's memory.
  const user = me.data?.user;
  useEffect(() => {
    if (!user) return;
    if (isLanguage(user.locale) && user.locale !== i18n.language) chooseLanguage(user.locale);
    const zone = user.time_zone ?? undefined;
    if (zone !== preferences().timeZone) setPreferences({ timeZone: zone });
  }, [user, i18n.language]);

  type Change = { locale?: Language | null; time_zone?: string | null };
  const save = useMutation({
    mutationFn: (change: Change) => unwrap(api.PATCH("/api/v1/me", { body: change })),
    // The account says the new choice at once, so the effect above does not
    // put the old one back while the request is on its way.
    onMutate: (change: Change) =>
      queryClient.setQueryData<typeof me.data>(keys.me, (old) => (old?.user ? { ...old, user: { ...old.user, ...change } } : old)),
    onSettled: () => void queryClient.invalidateQueries({ queryKey: keys.me }),
    onError: (error) => notifyError(error),
  });
  // Every zone with its offset now, UTC first (browsers leave it out), so
  // a search for "Seoul" or "UTC+9" finds it.
  const zones = useMemo(
    () => ["UTC", ...Intl.supportedValuesOf("timeZone").filter((z) => z !== "UTC")].map((z) => ({ value: z, label: zoneLabel(z) })),
    [],
  );

  const memberships = me.data?.memberships ?? [];
  const operator = user?.is_operator ?? false;
  const currentOrg = orgId ?? memberships[0]?.organization.id;
  const viewing = useOperatorView(orgId);
  const can = useAbilities(currentOrg);
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
            <Burger opened={opened} onClick={toggle} hiddenFrom="sm" size="sm" aria-label={t("nav.toggle")} />
            <Text fw={700} size="lg">
              {t("common.appName")}
            </Text>
            {memberships.length > 0 && !viewing && (
              <Select
                aria-label={t("nav.organization")}
                size="xs"
                w={{ base: 150, sm: 220 }}
                data={memberships.map((m) => ({ value: m.organization.id, label: m.organization.name }))}
                value={currentOrg ?? null}
                onChange={switchOrg}
                allowDeselect={false}
              />
            )}
          </Group>
          <Menu position="bottom-end" withinPortal closeOnItemClick={false} width={320}>
            <Menu.Target>
              <UnstyledButton aria-label={t("nav.account")} style={{ flexShrink: 0 }}>
                <Text size="sm" visibleFrom="sm">
                  {user?.email ?? t("nav.account")}
                </Text>
                <Text size="sm" hiddenFrom="sm">
                  {t("nav.account")}
                </Text>
              </UnstyledButton>
            </Menu.Target>
            <Menu.Dropdown miw={260}>
              {operator && <Menu.Label>{t("nav.platformOperator")}</Menu.Label>}
              <Menu.Label>{t("nav.language")}</Menu.Label>
              {(Object.entries(LANGUAGES) as [Language, string][]).map(([code, name]) => (
                <Menu.Item
                  key={code}
                  lang={code}
                  fw={code === i18n.language ? 700 : undefined}
                  aria-current={code === i18n.language ? "true" : undefined}
                  onClick={() => {
                    chooseLanguage(code);
                    if (user) save.mutate({ locale: code });
                  }}
                >
                  {name}
                </Menu.Item>
              ))}
              <Menu.Label>{t("nav.timeZone")}</Menu.Label>
              <Select
                aria-label={t("nav.timeZone")}
                size="xs"
                mx="xs"
                mb="xs"
                searchable
                comboboxProps={{ withinPortal: false }}
                data={[{ value: "", label: t("nav.browserTimeZone", { zone: zoneLabel(BROWSER_ZONE) }) }, ...zones]}
                // Typing searches anew instead of writing into the zone shown.
                onFocus={(event) => event.currentTarget.select()}
                value={user?.time_zone ?? ""}
                onChange={(zone) => {
                  setPreferences({ timeZone: zone || undefined });
                  save.mutate({ time_zone: zone || null });
                }}
                allowDeselect={false}
              />
              <Menu.Divider />
              {/* The manual is served beside the console, in English. */}
              <Menu.Item component="a" href="/docs/" lang="en">
                {t("nav.docs")}
              </Menu.Item>
              {/* A user made by an identity provider signs in there and has no password here. */}
              {user?.has_password && (
                <Menu.Item closeMenuOnClick onClick={openPassword}>
                  {t("nav.changePassword")}
                </Menu.Item>
              )}
              <Menu.Item onClick={() => void session.signOut()}>{t("nav.signOut")}</Menu.Item>
            </Menu.Dropdown>
          </Menu>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs" aria-label={t("nav.main")}>
        <ScrollArea>
          {currentOrg && (
            <>
              <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="xs">
                {t("nav.organization")}
              </Text>
              <RouterNavLink label={t("nav.overview")} to="/orgs/$orgId" params={{ orgId: currentOrg }} activeOptions={{ exact: true }} activeProps={{ active: true }} />
              {can.order && <RouterNavLink label={t("nav.launch")} to="/orgs/$orgId/launch" params={{ orgId: currentOrg }} activeProps={{ active: true }} />}
              <RouterNavLink label={t("nav.orders")} to="/orgs/$orgId/orders" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.reservations")} to="/orgs/$orgId/reservations" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.volumes")} to="/orgs/$orgId/volumes" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
              {can.billing && (
                <>
                  <RouterNavLink label={t("nav.usage")} to="/orgs/$orgId/usage" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
                  <RouterNavLink label={t("nav.invoices")} to="/orgs/$orgId/invoices" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
                  <RouterNavLink label={t("nav.sla")} to="/orgs/$orgId/sla" params={{ orgId: currentOrg }} activeProps={{ active: true }} />
                </>
              )}
              <RouterNavLink
                label={t("nav.members")}
                to="/orgs/$orgId/settings"
                params={{ orgId: currentOrg }}
                activeProps={{ active: settingsTab !== "ssh" }}
              />
              {!viewing && (
                <RouterNavLink
                  label={t("nav.sshKeys")}
                  to="/orgs/$orgId/settings"
                  params={{ orgId: currentOrg }}
                  search={{ tab: "ssh" }}
                  activeOptions={{ includeSearch: true }}
                  activeProps={{ active: true }}
                />
              )}
            </>
          )}
          <RouterNavLink label={t("nav.catalog")} to="/catalog" activeProps={{ active: true }} />
          {operator && (
            <>
              <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="md">
                {t("nav.operator")}
              </Text>
              <RouterNavLink label={t("nav.capacity")} to="/admin/capacity" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.calendar")} to="/admin/calendar" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.queues")} to="/admin/queues" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.trends")} to="/admin/trends" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.orgs")} to="/admin/orgs" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.nodes")} to="/admin/nodes" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.editCatalog")} to="/admin/catalog" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.slaReports")} to="/admin/sla" activeProps={{ active: true }} />
              <RouterNavLink label={t("nav.audit")} to="/admin/audit" activeProps={{ active: true }} />
            </>
          )}
          <Text size="xs" c="dimmed" tt="uppercase" fw={700} px="sm" pt="md">
            {t("nav.developers")}
          </Text>
          <RouterNavLink label={t("nav.apiReference")} to="/api-reference" activeProps={{ active: true }} />
        </ScrollArea>
      </AppShell.Navbar>
      <AppShell.Main>
        {viewing && orgId && (
          <Alert color="blue" variant="light" mb="md" data-testid="operator-view" title={t("nav.operatorViewTitle")}>
            {t("nav.operatorViewBody", { name: orgNames.data?.get(orgId) ?? t("nav.thisOrganization") })}{" "}
            <AnchorLink to="/admin/orgs/$orgId" params={{ orgId }} size="sm" c="inherit" underline="always" fw={600}>
              {t("nav.operatorViewLink")}
            </AnchorLink>
          </Alert>
        )}
        {/* Pages show what the user's role allows: they wait for the roles. */}
        {me.isPending ? (
          <Center p="xl">
            <Loader aria-label={t("common.loading")} />
          </Center>
        ) : (
          <Outlet />
        )}
      </AppShell.Main>
      <ChangePassword opened={passwordOpened} onClose={closePassword} />
    </AppShell>
  );
}

// Every console page and its address. Pages load on first visit, so the
// first page a user opens carries only its own code.
import type { ComponentType } from "react";
import { createRootRoute, createRoute, createRouter, lazyRouteComponent, Outlet, redirect } from "@tanstack/react-router";
import { safeNext, session } from "./api/session";
import { Shell } from "./components/Shell";
import { NotFound } from "./components/NotFound";
import { NeedsRole } from "./components/NeedsRole";
import { HomeRedirect } from "./pages/HomeRedirect";

/** A page that only roles with `ability` use; others read why instead of a refusal. */
function needsRole(ability: "order" | "billing", Page: ComponentType) {
  return function Guarded() {
    return (
      <NeedsRole ability={ability}>
        <Page />
      </NeedsRole>
    );
  };
}

const rootRoute = createRootRoute({
  component: Outlet,
  notFoundComponent: NotFound,
});

type NextSearch = { next?: string };
const nextSearch = (search: Record<string, unknown>): NextSearch => {
  const next = safeNext(search.next);
  return next ? { next } : {};
};

type SignInSearch = NextSearch & { sso_error?: string; sso_provider?: string };
/** Where a single sign-on refused sends the browser back: why, and by whom. */
const signInSearch = (search: Record<string, unknown>): SignInSearch => {
  const found: SignInSearch = nextSearch(search);
  const word = (value: unknown) => (typeof value === "string" && /^[a-z0-9_-]{1,64}$/.test(value) ? value : undefined);
  const error = word(search.sso_error);
  if (error) found.sso_error = error;
  const provider = word(search.sso_provider);
  if (provider) found.sso_provider = provider;
  return found;
};

const signIn = createRoute({
  getParentRoute: () => rootRoute,
  path: "/sign-in",
  validateSearch: signInSearch,
  component: lazyRouteComponent(() => import("./pages/SignIn"), "SignInPage"),
});

const signUp = createRoute({
  getParentRoute: () => rootRoute,
  path: "/sign-up",
  // An invitation's link names the email it was sent to: signing up with it joins that organization.
  validateSearch: (search: Record<string, unknown>): { invited?: string } =>
    typeof search.invited === "string" && search.invited.length <= 254 ? { invited: search.invited } : {},
  component: lazyRouteComponent(() => import("./pages/SignUp"), "SignUpPage"),
});

const app = createRoute({
  getParentRoute: () => rootRoute,
  id: "app",
  beforeLoad: async ({ location }) => {
    if (!(await session.fresh())) throw redirect({ to: "/sign-in", search: nextSearch({ next: location.href }) });
  },
  component: Shell,
});

const home = createRoute({ getParentRoute: () => app, path: "/", component: HomeRedirect });

const catalog = createRoute({
  getParentRoute: () => app,
  path: "/catalog",
  component: lazyRouteComponent(() => import("./pages/tenant/Catalog"), "CatalogPage"),
});

const apiReference = createRoute({
  getParentRoute: () => app,
  path: "/api-reference",
  component: lazyRouteComponent(() => import("./pages/ApiReference"), "ApiReferencePage"),
});

const org = createRoute({ getParentRoute: () => app, path: "/orgs/$orgId" });

const overview = createRoute({
  getParentRoute: () => org,
  path: "/",
  component: lazyRouteComponent(() => import("./pages/tenant/Overview"), "OverviewPage"),
});

const launch = createRoute({
  getParentRoute: () => org,
  path: "/launch",
  component: needsRole("order", lazyRouteComponent(() => import("./pages/tenant/Launch"), "LaunchPage")),
});

export type OrdersSearch = { status?: string; array?: string };
const orders = createRoute({
  getParentRoute: () => org,
  path: "/orders",
  validateSearch: (search: Record<string, unknown>): OrdersSearch => ({
    ...(typeof search.status === "string" ? { status: search.status } : {}),
    ...(typeof search.array === "string" ? { array: search.array } : {}),
  }),
  component: lazyRouteComponent(() => import("./pages/tenant/Orders"), "OrdersPage"),
});

const orderDetail = createRoute({
  getParentRoute: () => org,
  path: "/orders/$orderId",
  component: lazyRouteComponent(() => import("./pages/tenant/OrderDetail"), "OrderDetailPage"),
});

const reservations = createRoute({
  getParentRoute: () => org,
  path: "/reservations",
  component: lazyRouteComponent(() => import("./pages/tenant/Reservations"), "ReservationsPage"),
});

const volumes = createRoute({
  getParentRoute: () => org,
  path: "/volumes",
  component: lazyRouteComponent(() => import("./pages/tenant/Volumes"), "VolumesPage"),
});

const usage = createRoute({
  getParentRoute: () => org,
  path: "/usage",
  component: needsRole("billing", lazyRouteComponent(() => import("./pages/tenant/Usage"), "UsagePage")),
});

const invoices = createRoute({
  getParentRoute: () => org,
  path: "/invoices",
  component: needsRole("billing", lazyRouteComponent(() => import("./pages/tenant/Invoices"), "InvoicesPage")),
});

const invoiceDetail = createRoute({
  getParentRoute: () => org,
  path: "/invoices/$invoiceId",
  component: needsRole("billing", lazyRouteComponent(() => import("./pages/tenant/InvoiceDetail"), "InvoiceDetailPage")),
});

const sla = createRoute({
  getParentRoute: () => org,
  path: "/sla",
  component: needsRole("billing", lazyRouteComponent(() => import("./pages/tenant/Sla"), "SlaPage")),
});

export const SETTINGS_TABS = ["members", "keys", "ssh", "webhooks", "registries"] as const;
export type SettingsTab = (typeof SETTINGS_TABS)[number];
const settings = createRoute({
  getParentRoute: () => org,
  path: "/settings",
  // The tab is in the address: it survives a reload, a language switch and a shared link.
  validateSearch: (search: Record<string, unknown>): { tab?: SettingsTab } =>
    SETTINGS_TABS.includes(search.tab as SettingsTab) ? { tab: search.tab as SettingsTab } : {},
  component: lazyRouteComponent(() => import("./pages/tenant/Settings"), "SettingsPage"),
});

const admin = createRoute({ getParentRoute: () => app, path: "/admin" });

const capacity = createRoute({
  getParentRoute: () => admin,
  path: "/capacity",
  component: lazyRouteComponent(() => import("./pages/operator/Capacity"), "CapacityPage"),
});

const calendar = createRoute({
  getParentRoute: () => admin,
  path: "/calendar",
  component: lazyRouteComponent(() => import("./pages/operator/Calendar"), "CalendarPage"),
});

const queues = createRoute({
  getParentRoute: () => admin,
  path: "/queues",
  component: lazyRouteComponent(() => import("./pages/operator/Queues"), "QueuesPage"),
});

const trends = createRoute({
  getParentRoute: () => admin,
  path: "/trends",
  component: lazyRouteComponent(() => import("./pages/operator/Trends"), "TrendsPage"),
});

const adminOrgs = createRoute({
  getParentRoute: () => admin,
  path: "/orgs",
  component: lazyRouteComponent(() => import("./pages/operator/Organizations"), "OrganizationsPage"),
});

const adminOrg = createRoute({
  getParentRoute: () => admin,
  path: "/orgs/$orgId",
  component: lazyRouteComponent(() => import("./pages/operator/Organization"), "OrganizationPage"),
});

const adminCatalog = createRoute({
  getParentRoute: () => admin,
  path: "/catalog",
  component: lazyRouteComponent(() => import("./pages/operator/CatalogAdmin"), "CatalogAdminPage"),
});

const nodes = createRoute({
  getParentRoute: () => admin,
  path: "/nodes",
  component: lazyRouteComponent(() => import("./pages/operator/Nodes"), "NodesPage"),
});

const nodeDetail = createRoute({
  getParentRoute: () => admin,
  path: "/nodes/$nodeId",
  component: lazyRouteComponent(() => import("./pages/operator/NodeDetail"), "NodeDetailPage"),
});

const adminSla = createRoute({
  getParentRoute: () => admin,
  path: "/sla",
  component: lazyRouteComponent(() => import("./pages/operator/AdminSla"), "AdminSlaPage"),
});

const audit = createRoute({
  getParentRoute: () => admin,
  path: "/audit",
  component: lazyRouteComponent(() => import("./pages/operator/AuditLog"), "AuditLogPage"),
});

const routeTree = rootRoute.addChildren([
  signIn,
  signUp,
  app.addChildren([
    home,
    catalog,
    apiReference,
    org.addChildren([overview, launch, orders, orderDetail, reservations, volumes, usage, invoices, invoiceDetail, sla, settings]),
    admin.addChildren([capacity, calendar, queues, trends, adminOrgs, adminOrg, adminCatalog, nodes, nodeDetail, adminSla, audit]),
  ]),
]);

export const router = createRouter({ routeTree, defaultPreload: "intent" });

declare module "@tanstack/react-router" {
  interface Register {
    router: typeof router;
  }
}

// Queries several pages share. Every key of tenant data starts with the
// organization id, so switching organization never shows another's cache.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "./client";

export const keys = {
  me: ["me"] as const,
  sshKeys: ["me", "ssh-keys"] as const,
  catalog: (what: "instance-types" | "regions" | "gpu-models" | "images" | "image-policy" | "price-versions" | "storage-prices", ...rest: unknown[]) =>
    ["catalog", what, ...rest] as const,
  availability: (instanceTypeId: string | undefined) => ["catalog", "availability", instanceTypeId] as const,
  org: (orgId: string, ...rest: unknown[]) => ["org", orgId, ...rest] as const,
  admin: (...rest: unknown[]) => ["admin", ...rest] as const,
};

export function useMe() {
  return useQuery({
    queryKey: keys.me,
    queryFn: () => unwrap(api.GET("/api/v1/me")),
    staleTime: 30_000,
  });
}

export function useInstanceTypes() {
  return useQuery({
    queryKey: keys.catalog("instance-types"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/catalog/instance-types", { params: { query: { limit: 200 } } })),
    select: (page) => page.items,
    staleTime: 60_000,
  });
}

/** Per region, instances of a type that could start now and GPUs already waiting. */
export function useLaunchAvailability(instanceTypeId: string | undefined) {
  return useQuery({
    queryKey: keys.availability(instanceTypeId),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/catalog/instance-types/{instance_type_id}/availability", {
          params: { path: { instance_type_id: instanceTypeId ?? "" } },
        }),
      ),
    enabled: instanceTypeId !== undefined,
    refetchInterval: 15_000,
  });
}

export function useRegions() {
  return useQuery({
    queryKey: keys.catalog("regions"),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/regions", { params: { query: { limit: 200 } } })),
    select: (page) => page.items,
    staleTime: 60_000,
  });
}

export function useGpuModelNames() {
  return useQuery({
    queryKey: keys.catalog("gpu-models"),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/gpu-models", { params: { query: { limit: 200 } } })),
    select: (page) => page.items.map((m) => m.name),
    staleTime: 60_000,
  });
}

export function useQuotas(orgId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "quotas"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/quotas", { params: { path: { org_id: orgId } } })),
  });
}

/** Every organization's name, for operators (`enabled` false elsewhere). */
export function useOrgNames(enabled = true) {
  return useQuery({
    queryKey: keys.admin("orgs"),
    queryFn: () => unwrap(api.GET("/api/v1/admin/orgs", { params: { query: { limit: 200 } } })),
    select: (page) => new Map(page.items.map((o) => [o.id, o.name])),
    enabled,
  });
}

export function useSshKeys() {
  return useQuery({
    queryKey: keys.sshKeys,
    queryFn: () => unwrap(api.GET("/api/v1/me/ssh-keys")),
  });
}

export function useImages() {
  return useQuery({
    queryKey: keys.catalog("images"),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/images", { params: { query: { limit: 200 } } })),
    select: (page) => page.items,
    staleTime: 60_000,
  });
}

/** Registries and repositories orders may name images from, beside the catalog's. */
export function useImagePolicy() {
  return useQuery({
    queryKey: keys.catalog("image-policy"),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/image-policy")),
    select: (policy) => policy.allowed_prefixes,
    staleTime: 60_000,
  });
}

/** The organization's registry logins; never their passwords. */
export function useRegistryCredentials(orgId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "registry-credentials"),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/registry-credentials", {
          params: { path: { org_id: orgId }, query: { limit: 200 } },
        }),
      ),
    select: (page) => page.items,
  });
}

/** What the organization's usage costs over a period (this month when absent), rated as its invoice will be. */
export function useSpend(orgId: string, period?: { from: string; to: string }, enabled = true) {
  return useQuery({
    enabled,
    queryKey: keys.org(orgId, "spend", period ?? "month"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/spend", { params: { path: { org_id: orgId }, query: { ...period } } })),
    refetchInterval: 30_000,
    retry: false,
  });
}

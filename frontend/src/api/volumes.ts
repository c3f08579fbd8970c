// The organization's volumes and the storage prices they are billed at.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "./client";
import { keys } from "./queries";

export type Volume = Schemas["Volume"];
export type StoragePrice = Schemas["StoragePrice"];

export function useVolumes(orgId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "volumes"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/orgs/{org_id}/volumes", { params: { path: { org_id: orgId }, query: { limit: 200 } } })),
    select: (page) => page.items,
    // A volume being made, grown or erased changes within a heartbeat.
    refetchInterval: 5_000,
  });
}

export function useStoragePrices() {
  return useQuery({
    queryKey: keys.catalog("storage-prices"),
    queryFn: () => unwrap(api.GET("/api/v1/catalog/storage-prices")),
    staleTime: 60_000,
  });
}

/** The price per GiB-month in force now for a volume of `kind` in `region`: the region's own, else everyone's. */
export function storagePriceOf(prices: StoragePrice[], kind: string, region: string, now = new Date()): number | undefined {
  const latest = (own: boolean) =>
    prices
      .filter((p) => p.kind === kind && (own ? p.region === region : p.region == null) && new Date(p.effective_from) <= now)
      .sort((a, b) => b.effective_from.localeCompare(a.effective_from))[0]?.gib_month_micros;
  return latest(true) ?? latest(false);
}

export function useVolumeChanges(orgId: string) {
  const queryClient = useQueryClient();
  const refresh = () => void queryClient.invalidateQueries({ queryKey: keys.org(orgId, "volumes") });
  const path = (volumeId: string) => ({ path: { org_id: orgId, volume_id: volumeId } });
  return {
    create: useMutation({
      mutationFn: (body: Schemas["CreateVolume"]) =>
        unwrap(api.POST("/api/v1/orgs/{org_id}/volumes", { params: { path: { org_id: orgId } }, body })),
      onSuccess: refresh,
    }),
    grow: useMutation({
      mutationFn: ({ id, sizeGib }: { id: string; sizeGib: number }) =>
        unwrap(api.PATCH("/api/v1/orgs/{org_id}/volumes/{volume_id}", { params: path(id), body: { size_gib: sizeGib } })),
      onSuccess: refresh,
    }),
    remove: useMutation({
      mutationFn: (id: string) => unwrap(api.DELETE("/api/v1/orgs/{org_id}/volumes/{volume_id}", { params: path(id) })),
      onSuccess: refresh,
    }),
  };
}

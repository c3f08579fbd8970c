// Reservations of one organization, what can be reserved when, and the
// operator's calendar.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, type Schemas, unwrap } from "./client";
import { keys } from "./queries";

export type Reservation = Schemas["Reservation"];
export type ReservationAsk = Schemas["CreateReservation"];

const LIVE = new Set<Schemas["ReservationState"]>(["upcoming", "active"]);

export function useReservations(orgId: string) {
  return useQuery({
    queryKey: keys.org(orgId, "reservations"),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/reservations", {
          params: { path: { org_id: orgId }, query: { limit: 100 } },
        }),
      ),
    select: (page) => page.items,
    refetchInterval: (query) =>
      query.state.data?.items.some((r) => r.state === "active") ? 10_000 : 60_000,
  });
}

/** Reservations an order can run in now or later. */
export function liveReservations(all: Reservation[] | undefined): Reservation[] {
  return (all ?? []).filter((r) => LIVE.has(r.state));
}

export function useAvailability(orgId: string, instanceType: string, region: string, from: string, hours: number) {
  return useQuery({
    queryKey: keys.org(orgId, "availability", instanceType, region, from, hours),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/orgs/{org_id}/reservations/availability", {
          params: { path: { org_id: orgId }, query: { instance_type: instanceType, region, from, hours } },
        }),
      ),
    enabled: Boolean(instanceType && region),
    refetchInterval: 30_000,
  });
}

export function useQuote(orgId: string, ask: ReservationAsk | null) {
  return useQuery({
    queryKey: keys.org(orgId, "quote", ask),
    queryFn: () =>
      unwrap(
        api.POST("/api/v1/orgs/{org_id}/reservations/quote", {
          params: { path: { org_id: orgId } },
          body: ask as ReservationAsk,
        }),
      ),
    enabled: ask !== null,
    retry: false,
  });
}

function useReservationChange<T>(orgId: string, call: (input: T) => Promise<Reservation>) {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: call,
    onSuccess: () => {
      void queryClient.invalidateQueries({ queryKey: keys.org(orgId) });
    },
  });
}

export function useReserve(orgId: string) {
  return useReservationChange(orgId, (ask: ReservationAsk) =>
    unwrap(api.POST("/api/v1/orgs/{org_id}/reservations", { params: { path: { org_id: orgId } }, body: ask })),
  );
}

export function useCancelReservation(orgId: string) {
  return useReservationChange(orgId, (id: string) =>
    unwrap(
      api.POST("/api/v1/orgs/{org_id}/reservations/{reservation_id}/cancel", {
        params: { path: { org_id: orgId, reservation_id: id } },
      }),
    ),
  );
}

export function useExtendReservation(orgId: string) {
  return useReservationChange(orgId, ({ id, endsAt }: { id: string; endsAt: string }) =>
    unwrap(
      api.POST("/api/v1/orgs/{org_id}/reservations/{reservation_id}/extend", {
        params: { path: { org_id: orgId, reservation_id: id } },
        body: { ends_at: endsAt },
      }),
    ),
  );
}

export function useCapacityCalendar(gpuModel: string, region: string | null, from: string, hours: number) {
  return useQuery({
    queryKey: keys.admin("calendar", gpuModel, region, from, hours),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/admin/capacity/calendar", {
          params: { query: { gpu_model: gpuModel, region: region ?? undefined, from, hours } },
        }),
      ),
    enabled: Boolean(gpuModel),
    refetchInterval: 30_000,
  });
}

/** The next whole hour (UTC) after `now`, as the API writes times. */
export function nextHour(now = Date.now()): string {
  const hour = 3_600_000;
  return new Date(Math.floor(now / hour) * hour + hour).toISOString().replace(".000Z", "Z");
}

/** `iso` moved by `hours`. */
export function addHours(iso: string, hours: number): string {
  return new Date(Date.parse(iso) + hours * 3_600_000).toISOString().replace(".000Z", "Z");
}

export type MaintenanceAsk = Schemas["CreateMaintenance"];

export function useMaintenance() {
  return useQuery({
    queryKey: keys.admin("maintenance"),
    queryFn: () => unwrap(api.GET("/api/v1/admin/maintenance")),
    refetchInterval: 30_000,
  });
}

export function useScheduleMaintenance() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: ({ ask, force }: { ask: MaintenanceAsk; force: boolean }) =>
      unwrap(api.POST("/api/v1/admin/maintenance", { params: { query: { force } }, body: ask })),
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: keys.admin() }),
  });
}

export function useCancelMaintenance() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (id: string) =>
      unwrap(api.POST("/api/v1/admin/maintenance/{window_id}/cancel", { params: { path: { window_id: id } } })),
    onSuccess: () => void queryClient.invalidateQueries({ queryKey: keys.admin() }),
  });
}

// The signed-in session: a bearer token kept in this browser's storage until
// it expires or the user signs out. Components subscribe through
// useSession().
import { useSyncExternalStore } from "react";

const KEY = "gantry.session";

export type SessionState = {
  token: string;
  expiresAt: number;
} | null;

type Status = { state: SessionState; expired: boolean };

let status: Status = { state: read(), expired: false };
const listeners = new Set<() => void>();

function read(): SessionState {
  try {
    const raw = globalThis.localStorage?.getItem(KEY);
    if (!raw) return null;
    const parsed = JSON.parse(raw) as SessionState;
    if (!parsed || typeof parsed.token !== "string" || parsed.expiresAt <= Date.now()) return null;
    return parsed;
  } catch {
    return null;
  }
}

function publish(next: Status) {
  status = next;
  if (next.state) globalThis.localStorage?.setItem(KEY, JSON.stringify(next.state));
  else globalThis.localStorage?.removeItem(KEY);
  listeners.forEach((listener) => listener());
}

export const session = {
  token(): string | null {
    const state = status.state;
    if (!state) return null;
    if (state.expiresAt <= Date.now()) {
      publish({ state: null, expired: true });
      return null;
    }
    return state.token;
  },
  signIn(token: string, expiresInSeconds: number) {
    publish({ state: { token, expiresAt: Date.now() + expiresInSeconds * 1000 }, expired: false });
  },
  signOut() {
    publish({ state: null, expired: false });
  },
  expire() {
    publish({ state: null, expired: true });
  },
  subscribe(listener: () => void) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },
  status(): Status {
    return status;
  },
};

export function useSession(): Status {
  return useSyncExternalStore(session.subscribe, session.status, session.status);
}

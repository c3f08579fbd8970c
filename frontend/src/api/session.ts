// The signed-in session: a short-lived bearer token kept in this browser's
// storage, renewed before it runs out from the refresh token the server
// keeps in an httpOnly cookie (scripts never see it). The session ends when
// a renewal is refused or the user signs out. Components subscribe through
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

/** Renewed this long before the token runs out. */
const MARGIN_MS = 30_000;

let renewing: Promise<string | null> | null = null;

/** A new token from the refresh cookie, or null when there is no session. */
async function renew(): Promise<string | null> {
  try {
    const answer = await fetch("/api/v1/auth/refresh", { method: "POST", credentials: "same-origin" });
    if (answer.ok) {
      const token = (await answer.json()) as { access_token: string; expires_in: number };
      session.signIn(token.access_token, token.expires_in);
      return token.access_token;
    }
  } catch {
    // Unreachable server: the session stands until a call says otherwise.
    return status.state?.token ?? null;
  }
  // Refused: a session that was there has ended; without one, nothing to say.
  publish({ state: null, expired: status.state !== null || status.expired });
  return null;
}

export const session = {
  /** The token if it is still good; renewal is `fresh()`'s job. */
  token(): string | null {
    const state = status.state;
    return state && state.expiresAt > Date.now() ? state.token : null;
  },
  /** A token good for a while yet: renewed first when it is about to run out. */
  async fresh(): Promise<string | null> {
    const state = status.state;
    if (state && state.expiresAt - Date.now() > MARGIN_MS) return state.token;
    renewing ??= renew().finally(() => {
      renewing = null;
    });
    return renewing;
  },
  signIn(token: string, expiresInSeconds: number) {
    publish({ state: { token, expiresAt: Date.now() + expiresInSeconds * 1000 }, expired: false });
  },
  /** Ends the session here and on the server (its refresh token is revoked). */
  async signOut() {
    // Revoked first: a page left before the answer must not find the
    // session still renewable.
    await fetch("/api/v1/auth/logout", { method: "POST", credentials: "same-origin" }).catch(() => undefined);
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

/**
 * Where to go back to after signing in: a path of this console, never the
 * sign-in or sign-up page itself (which would nest `next` in `next`).
 */
export function safeNext(next: unknown): string | undefined {
  if (typeof next !== "string" || !next.startsWith("/") || next.startsWith("//")) return undefined;
  if (/^\/sign-(in|up)(?:[/?#]|$)/.test(next)) return undefined;
  return next;
}

export function useSession(): Status {
  return useSyncExternalStore(session.subscribe, session.status, session.status);
}

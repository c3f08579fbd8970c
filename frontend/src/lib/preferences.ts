// The reader's language and time zone, as chosen on their account and kept
// in this browser so the sign-in page speaks it too. Formatting reads them;
// components that show times re-render when they change.
import { useSyncExternalStore } from "react";

const KEY = "gantry.preferences";

export type Preferences = {
  /** `en` or `ko`; the browser's when absent. */
  locale?: string;
  /** An IANA time zone; the browser's when absent. */
  timeZone?: string;
};

function read(): Preferences {
  try {
    const parsed = JSON.parse(globalThis.localStorage?.getItem(KEY) ?? "{}") as Preferences;
    return typeof parsed === "object" && parsed ? parsed : {};
  } catch {
    return {};
  }
}

let current = read();
const listeners = new Set<() => void>();

export function preferences(): Preferences {
  return current;
}

export function setPreferences(change: Preferences) {
  current = { ...current, ...change };
  globalThis.localStorage?.setItem(KEY, JSON.stringify(current));
  listeners.forEach((listener) => listener());
}

export function usePreferences(): Preferences {
  return useSyncExternalStore(
    (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    () => current,
  );
}

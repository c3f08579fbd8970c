// The organization the user last worked in, so the console opens there.
const KEY = "gantry.org";

export function rememberOrg(orgId: string) {
  globalThis.localStorage?.setItem(KEY, orgId);
}

export function lastOrg(): string | null {
  return globalThis.localStorage?.getItem(KEY) ?? null;
}

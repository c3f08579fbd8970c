// Every string the console shows exists in both languages: the catalogues
// hold the same keys with the same placeholders, every key the code asks
// for exists, every API enum shown as a word has both words, and no page
// writes English straight into its markup.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, test } from "vitest";
import en from "./en.json";
import ko from "./ko.json";

type Catalogue = { [key: string]: string | Catalogue };

const PLURAL = /_(zero|one|two|few|many|other)$/;
const SRC = join(import.meta.dirname, "..");

function flatten(catalogue: Catalogue, prefix = ""): Map<string, string> {
  const out = new Map<string, string>();
  for (const [key, value] of Object.entries(catalogue)) {
    const path = prefix ? `${prefix}.${key}` : key;
    if (typeof value === "string") out.set(path, value);
    else for (const [k, v] of flatten(value, path)) out.set(k, v);
  }
  return out;
}

/** Keys without plural suffixes, each with the placeholders its forms use. */
function bases(catalogue: Catalogue): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const [key, value] of flatten(catalogue)) {
    const base = key.replace(PLURAL, "");
    const names = out.get(base) ?? new Set<string>();
    for (const m of value.matchAll(/\{\{(\w+)\}\}/g)) if (m[1] !== "count") names.add(m[1] ?? "");
    for (const m of value.matchAll(/<(\w+)>/g)) names.add(`<${m[1]}>`);
    out.set(base, names);
  }
  return out;
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return /\.(ts|tsx)$/.test(name) && !/\.test\.|\.gen\.|\.d\.ts$/.test(name) ? [path] : [];
  });
}

const english = bases(en);
const korean = bases(ko);

describe("translations", () => {
  test("both languages hold the same strings with the same placeholders", () => {
    expect([...korean.keys()].filter((k) => !english.has(k))).toEqual([]);
    expect([...english.keys()].filter((k) => !korean.has(k))).toEqual([]);
    const differ = [...english].filter(([key, names]) => [...names].sort().join() !== [...(korean.get(key) ?? [])].sort().join());
    expect(differ.map(([key]) => key)).toEqual([]);
    const empty = [...flatten(en), ...flatten(ko)].filter(([, value]) => !value.trim());
    expect(empty).toEqual([]);
  });

  test("every key the console asks for exists", () => {
    const missing: string[] = [];
    for (const file of sources(SRC)) {
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/(?:\bt\(|i18nKey=)\s*["'`]([\w.]+)["'`]/g)) {
        const key = m[1] ?? "";
        if (!english.has(key)) missing.push(`${relative(SRC, file)}: ${key}`);
      }
    }
    expect(missing).toEqual([]);
  });

  test("every API value shown as a word has a word in both languages", () => {
    const document = JSON.parse(readFileSync(join(SRC, "..", "..", "openapi", "openapi.json"), "utf8")) as {
      components: { schemas: Record<string, { enum?: string[] }> };
    };
    const shown = ["OrderStatus", "ReservationState", "ReservationStatus", "NodeState", "InvoiceStatus", "PricingClass", "PriorityClass",
      "WorkloadClass", "OrgRole", "Condition", "LineKind", "GroupBy", "BalanceKind", "NodeRuntime", "DriverKind", "Placement",
      "VolumeStatus", "VolumeKind"];
    const values = shown.flatMap((name) => document.components.schemas[name]?.enum ?? []);
    expect(values.length).toBeGreaterThan(50);
    expect(values.filter((v) => !english.has(`enum.${v}`) || !korean.has(`enum.${v}`))).toEqual([]);
    // Why an attempt stopped reads as a sentence on the order's timeline.
    const causes = document.components.schemas.StopCause?.enum ?? [];
    expect(causes.length).toBeGreaterThan(5);
    expect(causes.filter((v) => !english.has(`timeline.cause.${v}`) || !korean.has(`timeline.cause.${v}`))).toEqual([]);
  });

  test("no page writes English into its markup", () => {
    // Text between tags, and the props people read, made of words.
    const patterns = [
      />\s*([A-Z][a-z]+(?:[ ,.'’-]+[A-Za-z]+)+[.!?]?)\s*</g,
      /\b(?:label|title|placeholder|description|aria-label|confirmLabel|message)="([^"]*[A-Za-z]{3}[^"]*)"/g,
    ];
    const found: string[] = [];
    for (const file of sources(SRC).filter((f) => f.endsWith(".tsx"))) {
      const text = readFileSync(file, "utf8");
      for (const pattern of patterns) {
        for (const m of text.matchAll(pattern)) found.push(`${relative(SRC, file)}: ${m[1]}`);
      }
    }
    expect(found).toEqual([]);
  });
});

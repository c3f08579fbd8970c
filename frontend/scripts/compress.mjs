// After `vite build`: gzip every text asset beside itself (the server sends
// the .gz to browsers that accept it) and report what the first page costs.
//
// "First page" is what a browser must load to show the orders page from a
// cold start: the entry chunk, the orders page's chunk and everything they
// import statically, as Vite's manifest records them.
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

const dist = new URL("../dist/", import.meta.url).pathname;
const TEXT = /\.(js|css|html|svg|json|txt|map)$/;

const gzipped = new Map();
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (TEXT.test(name) && !name.endsWith(".gz")) {
      const body = readFileSync(path);
      const packed = gzipSync(body, { level: 9 });
      gzipped.set(path.slice(dist.length), { raw: body.length, gzip: packed.length });
      if (packed.length < body.length) writeFileSync(`${path}.gz`, packed);
    }
  }
}
walk(dist);

const manifest = JSON.parse(readFileSync(join(dist, ".vite/manifest.json"), "utf8"));
function closure(key, seen = new Set()) {
  if (seen.has(key)) return seen;
  seen.add(key);
  for (const next of manifest[key]?.imports ?? []) closure(next, seen);
  return seen;
}
const chunks = new Set([...closure("index.html"), ...closure("src/pages/tenant/Orders.tsx")]);
const sum = (files) =>
  files.reduce((total, file) => ({ raw: total.raw + (gzipped.get(file)?.raw ?? 0), gzip: total.gzip + (gzipped.get(file)?.gzip ?? 0) }), { raw: 0, gzip: 0 });
const firstJs = sum([...chunks].map((k) => manifest[k].file));
const firstCss = sum([...chunks].flatMap((k) => manifest[k].css ?? []));
const allJs = sum([...gzipped.keys()].filter((f) => f.endsWith(".js")));

const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
console.log(`first page (orders) JavaScript: ${kb(firstJs.gzip)} gzip (${kb(firstJs.raw)} raw) in ${chunks.size} chunks`);
console.log(`first page (orders) CSS:        ${kb(firstCss.gzip)} gzip (${kb(firstCss.raw)} raw)`);
console.log(`all JavaScript (every page):    ${kb(allJs.gzip)} gzip (${kb(allJs.raw)} raw)`);

// The budget the console keeps: a first page over it fails the build.
const FIRST_PAGE_JS_BUDGET = 300 * 1024;
if (firstJs.gzip > FIRST_PAGE_JS_BUDGET) {
  console.error(`the first page's JavaScript (${kb(firstJs.gzip)} gzip) is over its budget of ${kb(FIRST_PAGE_JS_BUDGET)}`);
  process.exit(1);
}

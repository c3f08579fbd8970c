// Fails when src/api/schema.gen.ts is not what openapi-typescript makes of
// the committed openapi/openapi.json: the console's client must follow the
// API contract (run `npm run generate` after changing the API).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), "gantry-schema-"));
try {
  const fresh = join(dir, "schema.gen.ts");
  execFileSync(join(root, "node_modules/.bin/openapi-typescript"), ["../openapi/openapi.json", "-o", fresh], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
  });
  const committed = readFileSync(join(root, "src/api/schema.gen.ts"), "utf8");
  if (readFileSync(fresh, "utf8") !== committed) {
    console.error("src/api/schema.gen.ts is out of date with openapi/openapi.json; run `npm run generate` in frontend/");
    process.exit(1);
  }
  console.log("the generated API client matches openapi/openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}

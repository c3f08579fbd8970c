import { defineConfig } from "vitest/config";

// The browser suite: a real server on a fresh database, driven through
// Debian's chromium. One file at a time: each starts its own server.
export default defineConfig({
  test: {
    environment: "node",
    include: ["e2e/**/*.e2e.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});

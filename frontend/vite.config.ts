import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// `npm run dev` serves the console with hot reload and hands API calls to a
// Gantry server on :8080.
export default defineConfig({
  plugins: [react()],
  server: {
    proxy: { "/api": "http://127.0.0.1:8080" },
  },
  build: {
    target: "es2022",
    sourcemap: false,
    manifest: true,
    chunkSizeWarningLimit: 1600,
  },
});

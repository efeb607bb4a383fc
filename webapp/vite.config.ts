import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

// The build goes into the Python package, which serves it (forklift.app.server); it is not committed.
export default defineConfig({
  plugins: [preact()],
  build: {
    outDir: "../src/forklift/app/static",
    emptyOutDir: true,
    chunkSizeWarningLimit: 1600,  // the API page's Swagger UI, 1.55 MB, loaded by /docs alone
    rollupOptions: { input: { app: "index.html", docs: "docs.html" } },  // docs.html: the API's page (/docs)
  },
  server: { proxy: { "/api": "http://127.0.0.1:8080" } },
});

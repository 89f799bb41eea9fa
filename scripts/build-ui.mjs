// Bundles the dashboard (ui/) into dist/ui: one ES module with everything it imports (the
// generated clients, @connectrpc/connect-web), the page and its stylesheet. No CDN, no network:
// what the controller serves under /ui/ is exactly what is in dist/ui. Type-checked first
// (ui/tsconfig.json: the DOM's types, which the programs must not see).
import { copyFile, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { execFileSync } from "node:child_process";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "ui");

execFileSync(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", join(root, "ui", "tsconfig.json")], {
  stdio: "inherit",
});
await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });
await build({
  entryPoints: [join(root, "ui", "src", "main.ts")],
  outfile: join(out, "app.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  sourcemap: "linked",
  legalComments: "linked",
  logLevel: "warning",
});
for (const f of ["index.html", "style.css"]) await copyFile(join(root, "ui", f), join(out, f));
console.log(`dashboard built into ${out}`);

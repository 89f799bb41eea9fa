// Copies the few third-party .proto files the contract imports (google/api/http.proto and
// annotations.proto) from the google-proto-files npm package into .proto-deps/, so that
// `buf lint`, `buf generate` and `buf curl --schema .` work offline without the Buf Schema Registry.
import { copyFileSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
let pkgDir;
try {
  pkgDir = dirname(require.resolve("google-proto-files/package.json"));
} catch {
  // A production install (npm ci --omit=dev) has no dev dependencies and needs no schema.
  console.warn("proto-deps: google-proto-files is not installed; skipping .proto-deps/");
  process.exit(0);
}
const files = ["google/api/annotations.proto", "google/api/http.proto"];

for (const file of files) {
  const from = join(pkgDir, file);
  const to = join(root, ".proto-deps", file);
  if (existsSync(to) && readFileSync(to).equals(readFileSync(from))) continue;
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
}

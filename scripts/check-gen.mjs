// CI guard: fails when gen/ differs from a fresh `buf generate`, or when `buf lint` fails.
// Generates into a temporary directory (buf generate --output) so the working tree is untouched.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const buf = join(root, "node_modules", ".bin", "buf");
execFileSync(process.execPath, [join(root, "scripts", "proto-deps.mjs")], { stdio: "inherit" });
execFileSync(buf, ["lint"], { cwd: root, stdio: "inherit" });
const out = mkdtempSync(join(tmpdir(), "skipper-gen-"));
try {
  execFileSync(buf, ["generate", "--output", out], { cwd: root, stdio: "inherit" });
  const want = listFiles(join(out, "gen"));
  const have = listFiles(join(root, "gen"));
  const problems = [];
  for (const f of new Set([...want.keys(), ...have.keys()])) {
    if (!have.has(f)) problems.push(`missing from gen/: ${f}`);
    else if (!want.has(f)) problems.push(`not produced by buf generate: gen/${f}`);
    else if (!want.get(f).equals(have.get(f))) problems.push(`stale: gen/${f}`);
  }
  if (problems.length > 0) {
    console.error(`gen/ is out of date; run \`npm run generate\` and commit:\n  ${problems.join("\n  ")}`);
    process.exit(1);
  }
  console.log(`gen/ is up to date (${want.size} files) and buf lint passes`);
} finally {
  rmSync(out, { recursive: true, force: true });
}

function listFiles(dir, base = dir, acc = new Map()) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) listFiles(p, base, acc);
    else acc.set(relative(base, p), readFileSync(p));
  }
  return acc;
}

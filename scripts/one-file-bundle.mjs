// What the one-file bundles share (bundle-agent.mjs, bundle-cli.mjs): one ES module for Node 20+
// holding the program, common/, gen/ and every npm package it uses, so a machine needs neither
// the repository nor node_modules.
//
// CommonJS packages inside it (pino, sonic-boom, cli-table3's) call require() for Node built-ins,
// which an ES module has no `require` for: the banner gives the bundle one (createRequire). The
// entry's `#!/usr/bin/env node` stays the first line; the banner follows it.
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export const root = fileURLToPath(new URL("..", import.meta.url));

/** Bundles `entry` (relative to the repository) into `outfile`; `define` as esbuild's; `header`: lines put first. */
export async function bundleOneFile({ name, entry, outfile, define = {}, header = [] }) {
  const out = resolve(outfile);
  await build({
    entryPoints: [resolve(root, entry)],
    outfile: out,
    bundle: true,
    platform: "node",
    target: "node20",
    format: "esm",
    banner: {
      js: `${header.map((l) => `${l}\n`).join("")}import { createRequire as __bundleCreateRequire } from "node:module";\nconst require = __bundleCreateRequire(import.meta.url);`,
    },
    // The packages' licence comments, kept at the end of the one file that ships them.
    legalComments: "eof",
    define,
    logLevel: "warning",
  });
  process.stderr.write(`${name}: wrote ${out}\n`);
}

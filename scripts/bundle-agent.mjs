#!/usr/bin/env node
// `npm run bundle:agent`: skippy as ONE JavaScript file (dist/skippy.mjs, or the path given as the
// first argument) that needs only Node 20+ on a host: agent/, common/, gen/ and every npm package
// the agent uses are inside it, so a host gets no repository and no node_modules.
//
// What the bundle must not look for on disk:
// - Node built-ins: CommonJS packages (pino, sonic-boom) call require("os") etc., which an ES
//   module has no `require` for; the banner gives the bundle one (createRequire) for built-ins.
// - pino transports run in worker threads loaded from files beside pino, which a bundle does not
//   have. The agent's logger (common/logging/logger.ts) writes through pino.destination and
//   pino.multistream, in-thread, and never starts a transport; keep it that way.
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const outfile = resolve(process.argv[2] ?? `${root}/dist/skippy.mjs`);

await build({
  entryPoints: [`${root}/agent/main.ts`],
  outfile,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  // main.ts's `#!/usr/bin/env node` stays the first line; the banner follows it.
  banner: {
    js: 'import { createRequire as __skippyCreateRequire } from "node:module";\nconst require = __skippyCreateRequire(import.meta.url);',
  },
  // The packages' licence comments, kept at the end of the one file that ships them.
  legalComments: "eof",
  // `skippy install` copies the file it runs from, which must be this one (agent/install.ts).
  define: { __SKIPPY_BUNDLE__: "true" },
  logLevel: "warning",
});
process.stderr.write(`bundle:agent: wrote ${outfile}\n`);

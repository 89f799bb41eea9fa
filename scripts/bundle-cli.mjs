#!/usr/bin/env node
// `npm run bundle:cli`: skipper, the command line, as ONE JavaScript file (dist/skipper.mjs, or the
// path given as the first argument) that needs only Node 20+: cli/, common/, gen/ and every npm
// package the CLI uses are inside it, so an operator's machine gets no repository and no
// node_modules.
//
// What the bundle must not look for on disk: Node built-ins that CommonJS packages (cli-table3's
// dependencies) ask for with require(), which an ES module has no `require` for; the banner gives
// the bundle one (createRequire) for built-ins, as the agent's bundle does.
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const outfile = resolve(process.argv[2] ?? `${root}/dist/skipper.mjs`);

await build({
  entryPoints: [`${root}/cli/main.ts`],
  outfile,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  // main.ts's `#!/usr/bin/env node` stays the first line; the banner follows it.
  banner: {
    js: 'import { createRequire as __skipperCreateRequire } from "node:module";\nconst require = __skipperCreateRequire(import.meta.url);',
  },
  // The packages' licence comments, kept at the end of the one file that ships them.
  legalComments: "eof",
  logLevel: "warning",
});
process.stderr.write(`bundle:cli: wrote ${outfile}\n`);

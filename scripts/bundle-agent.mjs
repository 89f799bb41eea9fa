#!/usr/bin/env node
// `npm run bundle:agent`: skippy as ONE JavaScript file (dist/skippy.mjs, or the path given as the
// first argument) that needs only Node 20+ on a host (one-file-bundle.mjs).
//
// pino transports run in worker threads loaded from files beside pino, which a bundle does not
// have. The agent's logger (common/logging/logger.ts) writes through pino.destination and
// pino.multistream, in-thread, and never starts a transport; keep it that way.
import { bundleOneFile, root } from "./one-file-bundle.mjs";

await bundleOneFile({
  name: "bundle:agent",
  entry: "agent/main.ts",
  outfile: process.argv[2] ?? `${root}/dist/skippy.mjs`,
  // `skippy install` copies the file it runs from, which must be this one (agent/install.ts).
  define: { __SKIPPY_BUNDLE__: "true" },
});

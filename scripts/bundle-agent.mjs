#!/usr/bin/env node
// `npm run bundle:agent`: skippy as ONE JavaScript file (dist/skippy.mjs, or the path given as the
// first argument) that needs only Node 20+ on a host (one-file-bundle.mjs).
//
// pino transports run in worker threads loaded from files beside pino, which a bundle does not
// have. The agent's logger (common/logging/logger.ts) writes through pino.destination and
// pino.multistream, in-thread, and never starts a transport; keep it that way.
import { readFileSync } from "node:fs";
import { bundleOneFile, root } from "./one-file-bundle.mjs";

// The controller that serves the bundle to joining hosts signs it as this version
// (controller/nodes/agent-bundles.ts reads the line).
const version = /AGENT_VERSION = "([^"]+)"/.exec(readFileSync(`${root}/agent/agent-version.ts`, "utf8"))?.[1];
if (!version) throw new Error("bundle:agent: no AGENT_VERSION in agent/agent-version.ts");

await bundleOneFile({
  name: "bundle:agent",
  entry: "agent/main.ts",
  outfile: process.argv[2] ?? `${root}/dist/skippy.mjs`,
  // `skippy install` copies the file it runs from, which must be this one (agent/install.ts).
  define: { __SKIPPY_BUNDLE__: "true" },
  header: [`// skippy-bundle-version: ${version}`],
});

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
// (controller/nodes/agent-bundles.ts reads the line). SKIPPY_BUNDLE_VERSION builds another one
// (a release, or the two versions the self-update tests switch between): it is what the bundle
// states in its header and what the agent reports (AGENT_VERSION).
const fallback = /DEFAULT_AGENT_VERSION = "([^"]+)"/.exec(readFileSync(`${root}/agent/agent-version.ts`, "utf8"))?.[1];
if (!fallback) throw new Error("bundle:agent: no DEFAULT_AGENT_VERSION in agent/agent-version.ts");
const version = process.env.SKIPPY_BUNDLE_VERSION || fallback;
// As agent/updater/update-files.ts VERSION_PATTERN, and one word in the header line.
if (!/^[A-Za-z0-9._-]{1,64}$/.test(version))
  throw new Error(`bundle:agent: SKIPPY_BUNDLE_VERSION '${version}' is not [A-Za-z0-9._-]{1,64}`);

await bundleOneFile({
  name: "bundle:agent",
  entry: "agent/main.ts",
  outfile: process.argv[2] ?? `${root}/dist/skippy.mjs`,
  // `skippy install` copies the file it runs from, which must be this one (agent/install.ts).
  define: { __SKIPPY_BUNDLE__: "true", __SKIPPY_AGENT_VERSION__: JSON.stringify(version) },
  header: [`// skippy-bundle-version: ${version}`],
});

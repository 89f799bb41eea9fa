#!/usr/bin/env node
// `npm run bundle:cli`: skipper, the command line, as ONE JavaScript file (dist/skipper.mjs, or the
// path given as the first argument) that needs only Node 20+ on an operator's machine
// (one-file-bundle.mjs).
import { bundleOneFile, root } from "./one-file-bundle.mjs";

await bundleOneFile({ name: "bundle:cli", entry: "cli/main.ts", outfile: process.argv[2] ?? `${root}/dist/skipper.mjs` });

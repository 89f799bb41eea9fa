#!/usr/bin/env node
// skipper: the operator's command line for a Skipper controller (program.ts has the commands).
import { processIo } from "./io.js";
import { run } from "./program.js";

process.exitCode = await run(process.argv.slice(2), processIo());

import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "common/**/*.test.ts", "controller/**/*.test.ts", "agent/**/*.test.ts", "cli/**/*.test.ts"],
    // End-to-end tests drive real processes and engines; under a loaded CI a step can take a while.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Two test files at a time: most of the suite's time is end-to-end files waiting on processes,
    // engines and the network, not on the CPU, and two workers on this 2-core machine take the
    // clean-clone run from about 41 minutes to about 28. Every file keeps to names of its own
    // (RUN_ID in containers and projects, databases per file, free ports), so files do not meet.
    maxWorkers: 2,
    globalSetup: ["test/global-setup.ts"],
  },
});

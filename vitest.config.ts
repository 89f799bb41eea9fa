import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "common/**/*.test.ts", "controller/**/*.test.ts", "agent/**/*.test.ts", "cli/**/*.test.ts"],
    // End-to-end tests drive real processes and engines; under a loaded CI a step can take a while.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    globalSetup: ["test/global-setup.ts"],
  },
});

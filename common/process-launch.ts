// The digest of what a process module runs: its version, argv and env. The agent records it with
// each start (agent/process/run-state.ts) and reports it (ProcessObservation.launch_digest); the
// controller's process reconciler computes it from the spec it wants, so a changed command or
// environment is seen as drift without the node ever reporting the env's values.
import { createHash } from "node:crypto";

/** What a launch is made of. */
export interface LaunchParts {
  version: string;
  /** argv[0] relative to the version directory. */
  argv: readonly string[];
  env: Readonly<Record<string, string>>;
}

/** Two launches with the same digest run the same thing (a version's files never change). */
export function launchDigest(launch: LaunchParts): string {
  const env = Object.entries(launch.env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return createHash("sha256")
    .update(JSON.stringify([launch.version, launch.argv, env]))
    .digest("hex");
}

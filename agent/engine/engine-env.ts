// Which engine the commands of a piece of work reach. The agent's own work reaches the host's
// engine (its DOCKER_HOST, as the operator set it up); a relay runs an SSH node's work inside
// withEngineEnv (agent/relay/), so that every docker and compose command that work starts
// (runCommand) and every Engine API call (engine-exec.ts) goes to the bridge to that node's
// engine instead, whichever executor makes it. The variables are carried by the async context
// (AsyncLocalStorage), not by arguments: the executors stay the ones an agent runs on its host.
import { AsyncLocalStorage } from "node:async_hooks";

const current = new AsyncLocalStorage<Readonly<Record<string, string>>>();

/** Runs `fn` (and everything it starts) with `env` set for the engine commands it runs. */
export function withEngineEnv<T>(env: Readonly<Record<string, string>>, fn: () => T): T {
  return current.run(env, fn);
}

/** The variables set for engine commands of the work running now (undefined: the host's own). */
export function engineEnv(): Readonly<Record<string, string>> | undefined {
  return current.getStore();
}

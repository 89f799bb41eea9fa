// Node programs of ours (dist/controller/main.js, dist/agent/main.js) as child processes of a
// benchmark: started with extra environment, waited for by a line of their JSON log, stopped.
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/**
 * Starts `node args…` with `env` added; resolves once `ready` returns a value for a JSON line of
 * its stdout (at once when no `ready` is given), with that value. Rejects if it exits first.
 */
export function spawnJson(
  args: string[],
  env: NodeJS.ProcessEnv,
  ready?: (l: Record<string, unknown>) => string | undefined,
): Promise<{ child: ChildProcess; value: string }> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((res, rej) => {
    if (!ready) {
      child.stdout!.resume();
      return res({ child, value: "" });
    }
    child.once("exit", (c) => rej(new Error(`${args[0]} exited ${c}`)));
    const rl = createInterface({ input: child.stdout! });
    rl.on("line", (line) => {
      try {
        const v = ready(JSON.parse(line) as Record<string, unknown>);
        if (v) {
          rl.removeAllListeners("line");
          child.stdout!.resume();
          res({ child, value: v });
        }
      } catch {
        // banner text
      }
    });
  });
}

/** Stops a child with SIGTERM and waits for it to exit (at once if it has). */
export async function stopChild(c: ChildProcess): Promise<void> {
  // A child that died of a signal has signalCode set and exitCode null.
  if (c.exitCode !== null || c.signalCode !== null) return;
  const done = new Promise((r) => c.once("exit", r));
  c.kill("SIGTERM");
  await done;
}

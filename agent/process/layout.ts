// Where a process module lives under the agent's work directory, the names that are safe to put
// in those paths, and the one typed error the process code throws. One place, so the installer,
// the supervisor, systemd and the executors agree on the layout:
//   <workDir>/versions/<module>/<version>/        an installed version (the artifact's contents)
//   <workDir>/versions/<module>/.<version>.json   its sha256 and the command that runs it
//   <workDir>/active/<module> -> ../versions/<module>/<version>
//   <workDir>/run/<module>.json                   desired state, pid, start time, previous version
//   <workDir>/logs/<module>.log                   the process's stdout and stderr, appended
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export const MODULE_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
// A version never starts with a dot, so hidden names beside versions (temp dirs, metadata) can
// never be taken for one.
export const VERSION_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;

export interface ModulePaths {
  versions: string;
  active: string;
  state: string;
  log: string;
}

/** The paths of one module's versions, active symlink, run state and log. */
export function modulePaths(workDir: string, module: string): ModulePaths {
  return {
    versions: join(workDir, "versions", module),
    active: join(workDir, "active", module),
    state: join(workDir, "run", `${module}.json`),
    log: join(workDir, "logs", `${module}.log`),
  };
}

export type ProcessErrorCode =
  | "PROCESS_INVALID"
  | "CHECKSUM_MISMATCH"
  | "SOURCE_UNAVAILABLE"
  | "MODULE_NOT_INSTALLED"
  | "VERSION_NOT_INSTALLED"
  // The process could not be started or stopped (spawn or systemctl failed, SIGKILL ignored).
  | "PROCESS_FAILED"
  | "CANCELLED";

/** A failure the executors report with its code as it is. */
export class ProcessError extends Error {
  override readonly name = "ProcessError";
  constructor(
    readonly code: ProcessErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export function isProcessError(e: unknown): e is ProcessError {
  return e instanceof ProcessError;
}

/** Throws CANCELLED when the order's signal has aborted. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new ProcessError("CANCELLED", "stopped: the order was cancelled");
}

export { syncDir, writeFileAtomic } from "../engine/durable-file.js";

/** The parsed JSON at `path`, or undefined when there is no such file. */
export async function readJson<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** A short random suffix for temp names. */
export function tempSuffix(): string {
  return randomBytes(6).toString("hex");
}

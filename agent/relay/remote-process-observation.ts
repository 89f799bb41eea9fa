// What the relay reads of an SSH node's process modules: the "key value" lines OBSERVE and INSPECT
// print (remote-process-scripts.ts), parsed into one record per module, and that record as the
// ProcessObservation a heartbeat or a result carries, judged as the agent judges its own
// (agent/process/module-control.ts observeModule): a live process is "running"; else a module the
// orders stopped is "stopped"; else one whose supervisor still runs (and starts it again after its
// backoff) is "restarting"; else "exited". Anything the node prints that is not of the expected
// shape (a module or version name outside their patterns, a record that is not JSON) is left out.
import { create } from "@bufbuild/protobuf";
import { ProcessObservationSchema, type ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { MODULE_PATTERN, VERSION_PATTERN } from "../process/layout.js";
import { compareVersions, type VersionMeta } from "../process/versions.js";

/** What the relay records of a module on the node (.run/state.json). */
export interface RemoteRunState {
  desired: "running" | "stopped";
  /** The launch the supervisor was last started with. */
  version: string;
  launchDigest: string;
  /** The version active before the last switch: where ROLLBACK goes. */
  previousVersion: string;
  /** The last rollback order applied, so its re-run does not roll back twice. */
  rollbackOrderId: string;
  /** "latest" could not be resolved and the newest installed version runs. */
  resolvedOffline: boolean;
}

/** One module as the node shows it. */
export interface RemoteModule {
  module: string;
  /** "" when it has no active symlink. */
  active: string;
  /** Lowest first. */
  installed: string[];
  /** The live supervisor's pid, 0 when none runs. */
  supervisor: number;
  /** The live process's pid, 0 when none runs. */
  pid: number;
  restarts: number;
  /** The last exit status the supervisor saw ("" when none). */
  lastExit: string;
  /** The active version's meta. */
  meta?: VersionMeta;
  state: RemoteRunState;
  /** The meta of the version INSPECT was asked about. */
  want?: VersionMeta;
}

/** The state of a module the relay has recorded nothing for. */
export function emptyRunState(): RemoteRunState {
  return { desired: "stopped", version: "", launchDigest: "", previousVersion: "", rollbackOrderId: "", resolvedOffline: false };
}

/** The modules in OBSERVE's or INSPECT's output, in the order printed. */
export function parseModules(output: string): RemoteModule[] {
  const out: RemoteModule[] = [];
  let cur: RemoteModule | undefined;
  for (const line of output.split("\n")) {
    const space = line.indexOf(" ");
    const key = space < 0 ? line : line.slice(0, space);
    const value = space < 0 ? "" : line.slice(space + 1);
    if (key === "module") {
      cur = MODULE_PATTERN.test(value) ? blank(value) : undefined;
      if (cur) out.push(cur);
      continue;
    }
    if (cur) read(cur, key, value);
  }
  for (const m of out) m.installed.sort(compareVersions);
  return out;
}

function blank(module: string): RemoteModule {
  return { module, active: "", installed: [], supervisor: 0, pid: 0, restarts: 0, lastExit: "", state: emptyRunState() };
}

function read(m: RemoteModule, key: string, value: string): void {
  switch (key) {
    case "active":
      if (isVersion(value)) m.active = value;
      return;
    case "installed":
      if (isVersion(value)) m.installed.push(value);
      return;
    case "supervisor":
      m.supervisor = count(value);
      return;
    case "pid":
      m.pid = count(value);
      return;
    case "restarts":
      m.restarts = count(value);
      return;
    case "exit":
      m.lastExit = /^\d{1,3}$/.test(value) ? value : "";
      return;
    case "meta":
      m.meta = versionMeta(value);
      return;
    case "want":
      m.want = versionMeta(value);
      return;
    case "state":
      m.state = runState(value);
      return;
  }
}

function isVersion(v: string): boolean {
  return VERSION_PATTERN.test(v) && v !== "active";
}

function count(v: string): number {
  const n = /^\d{1,10}$/.test(v) ? Number(v) : 0;
  return n <= 2 ** 31 - 1 ? n : 0;
}

function json(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function versionMeta(text: string): VersionMeta | undefined {
  const v = json(text);
  if (!v || !/^[0-9a-f]{64}$/.test(str(v.sha256))) return undefined;
  const argv = Array.isArray(v.argv) ? v.argv.filter((a): a is string => typeof a === "string") : [];
  const env: Record<string, string> = {};
  const given = typeof v.env === "object" && v.env !== null && !Array.isArray(v.env) ? (v.env as Record<string, unknown>) : {};
  for (const [k, val] of Object.entries(given)) if (typeof val === "string") env[k] = val;
  return { sha256: str(v.sha256), argv, env, installedAt: str(v.installedAt) };
}

function runState(text: string): RemoteRunState {
  const v = json(text);
  if (!v) return emptyRunState();
  const version = (s: unknown) => (isVersion(str(s)) ? str(s) : "");
  return {
    desired: v.desired === "running" ? "running" : "stopped",
    version: version(v.version),
    launchDigest: /^[0-9a-f]{64}$/.test(str(v.launchDigest)) ? str(v.launchDigest) : "",
    previousVersion: version(v.previousVersion),
    rollbackOrderId: str(v.rollbackOrderId).slice(0, 200),
    resolvedOffline: v.resolvedOffline === true,
  };
}

/** The module as a heartbeat or a result reports it. */
export function observationOf(m: RemoteModule, resolvedOffline = false): ProcessObservation {
  const state = m.pid > 0 ? "running" : m.state.desired !== "running" ? "stopped" : m.supervisor > 0 ? "restarting" : "exited";
  return create(ProcessObservationSchema, {
    module: m.module,
    activeVersion: m.active,
    previousVersion: m.state.previousVersion,
    installedVersions: m.installed,
    state,
    pid: m.pid,
    resolvedOffline: resolvedOffline || m.state.resolvedOffline,
    activeSha256: m.meta?.sha256 ?? "",
    launchDigest: m.state.launchDigest,
  });
}

// A process module's life on an SSH node, as the agent's module-control.ts and install.ts live it
// on its own host, made of RemoteProcesses' verbs:
//   obtain    a named version installed with the order's sha256 is used as it is (its command
//             recorded anew); installed with another, CHECKSUM_MISMATCH; otherwise the relay
//             fetches the artifact from its own allowed sources, checks its sha256, unpacks and
//             checks it (agent/process/artifact.ts) and sends the tree to the node; "latest" whose
//             source cannot be reached falls back to the newest version installed ON THE NODE
//   activate  stop, switch the active symlink, start, verify; a version that dies within the
//             settle time is switched back from and the one before started again (or left
//             stopped, as it was)
//   ensure    the active version runs: a live process of the same launch is adopted, never doubled
// Each start is verified the same way: the process the supervisor started is still alive
// `settleMs` later (not a restart of it).
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import { launchDigest } from "../../common/process-launch.js";
import { sleep } from "../engine/sleep.js";
import { fetchArtifact, readArtifactVersion, unpackArtifact, verifyChecksum, type FetchOptions } from "../process/artifact.js";
import type { Obtained } from "../process/install.js";
import { ProcessError, isProcessError, throwIfAborted } from "../process/layout.js";
import type { ActivateResult, StartResult } from "../process/module-control.js";
import type { Launch } from "../process/run-state.js";
import { START_MARK } from "../process/supervisor.js";
import type { VersionMeta } from "../process/versions.js";
import type { RemoteModule, RemoteRunState } from "./remote-process-observation.js";
import type { RemoteProcesses } from "./remote-processes.js";

export interface RemoteControl {
  remote: RemoteProcesses;
  graceMs: number;
  settleMs: number;
  signal?: AbortSignal;
}

/** Installs the spec's version on the node if needed (fetched and verified on the relay, under `scratch`). */
export async function obtainOnNode(c: RemoteControl, spec: ProcessSpec, scratch: string, fetch: FetchOptions = {}): Promise<Obtained> {
  const { remote, signal } = c;
  const module = spec.module;
  const sha256 = spec.sha256.toLowerCase();
  if (spec.version !== "latest") {
    const m = await remote.inspect(module, spec.version, signal);
    if (m?.installed.includes(spec.version)) {
      await keepInstalled(c, spec, spec.version, m.want, sha256);
      return { version: spec.version, installedNow: false, resolvedOffline: false, offlineReason: "" };
    }
  }
  await mkdir(scratch, { recursive: true });
  const staging = await mkdtemp(join(scratch, ".fetch-"));
  try {
    let artifact: Awaited<ReturnType<typeof fetchArtifact>>;
    try {
      artifact = await fetchArtifact(spec.source, staging, { ...fetch, signal });
    } catch (e) {
      if (spec.version !== "latest" || !isProcessError(e) || e.code !== "SOURCE_UNAVAILABLE") throw e;
      return await offline(c, spec, e.message);
    }
    verifyChecksum(artifact, sha256);
    const tree = join(staging, "tree");
    await mkdir(tree, { mode: 0o755 });
    await unpackArtifact(artifact, tree, signal);
    const version = spec.version === "latest" ? await readArtifactVersion(tree) : spec.version;
    const there = spec.version === "latest" ? await remote.inspect(module, version, signal) : undefined;
    if (there?.installed.includes(version)) {
      await keepInstalled(c, spec, version, there.want, sha256);
      return { version, installedNow: false, resolvedOffline: false, offlineReason: "" };
    }
    const meta: VersionMeta = { sha256, argv: spec.argv, env: spec.env, installedAt: new Date().toISOString() };
    await remote.install(module, version, tree, meta, signal);
    return { version, installedNow: true, resolvedOffline: false, offlineReason: "" };
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

// An installed version is kept only when it is the same artifact; the order's command replaces the recorded one.
async function keepInstalled(c: RemoteControl, spec: ProcessSpec, version: string, meta: VersionMeta | undefined, sha256: string) {
  if (!meta)
    throw new ProcessError(
      "CHECKSUM_MISMATCH",
      `version ${version} of ${spec.module} is installed on the node without a recorded sha256; it is not overwritten`,
    );
  if (meta.sha256 !== sha256) {
    throw new ProcessError(
      "CHECKSUM_MISMATCH",
      `version ${version} of ${spec.module} is installed with sha256 ${meta.sha256}, the order says ${sha256}; an installed version is never overwritten`,
    );
  }
  if (JSON.stringify([meta.argv, meta.env]) !== JSON.stringify([spec.argv, spec.env]))
    await c.remote.putMeta(spec.module, version, { ...meta, argv: spec.argv, env: spec.env });
}

async function offline(c: RemoteControl, spec: ProcessSpec, reason: string): Promise<Obtained> {
  const m = await c.remote.inspect(spec.module, "", c.signal);
  const newest = m?.installed[m.installed.length - 1];
  if (!newest)
    throw new ProcessError("SOURCE_UNAVAILABLE", `${reason}; no version of ${spec.module} is installed on the node to fall back to`);
  const meta = (await c.remote.inspect(spec.module, newest, c.signal))?.want;
  if (meta) await c.remote.putMeta(spec.module, newest, { ...meta, argv: spec.argv, env: spec.env });
  return { version: newest, installedNow: false, resolvedOffline: true, offlineReason: reason };
}

/** The launch of `version` of the module `m` shows, from its `meta`; VERSION_NOT_INSTALLED / MODULE_NOT_INSTALLED. */
export function launchFrom(module: string, version: string, meta: VersionMeta | undefined, installed: readonly string[]): Launch {
  if (!version) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${module} has no active version on the node`);
  if (!meta || !installed.includes(version))
    throw new ProcessError("VERSION_NOT_INSTALLED", `version ${version} of ${module} is not installed on the node`);
  return { module, version, argv: meta.argv, env: meta.env };
}

/** How an activation is recorded: "latest" resolved offline, the rollback order it carries out. */
export interface ActivateOptions {
  offline?: boolean;
  /** Recorded in the same write as the new version, before it starts: a re-run after a dropped connection sees it. */
  rollbackOrderId?: string;
}

/** Switches the module to `launch.version` and starts it; puts back the version before when the new one dies at once. */
export async function activateOnNode(
  c: RemoteControl,
  before: RemoteModule,
  launch: Launch,
  opts: ActivateOptions = {},
): Promise<ActivateResult> {
  const { remote } = c;
  const module = launch.module;
  const from = before.active;
  const prior = before.state;
  const previousVersion = from && from !== launch.version ? from : prior.previousVersion;
  const rollbackOrderId = opts.rollbackOrderId ?? prior.rollbackOrderId;
  throwIfAborted(c.signal);
  await remote.stop(module, c.graceMs);
  const started = await startVerified(c, { ...prior, previousVersion, resolvedOffline: opts.offline ?? false, rollbackOrderId }, launch);
  if (started.alive || !from || from === launch.version) return { ...started, restored: "", restoredAlive: false };
  // The new version died at once: back to what ran before, as if this attempt never happened.
  await remote.stop(module, c.graceMs);
  const back = await remote.inspect(module, from);
  if (prior.desired !== "running") {
    await remote.switchActive(module, from);
    await remote.putState(module, { ...prior, desired: "stopped" });
    return { ...started, restored: from, restoredAlive: false };
  }
  const again = await startVerified({ ...c, signal: undefined }, prior, launchFrom(module, from, back?.want, back?.installed ?? []));
  return { ...started, restored: from, restoredAlive: again.alive };
}

/** Makes the active version run: adopted when its process lives with the same launch, else (re)started. */
export async function ensureOnNode(c: RemoteControl, module: string, fresh = false): Promise<StartResult & { adopted: boolean }> {
  const m = await c.remote.inspect(module, "", c.signal);
  if (!m?.active) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${module} has no active version on the node`);
  const launch = launchFrom(module, m.active, m.meta, m.installed);
  if (m.pid > 0 && m.state.launchDigest === launchDigest(launch) && !fresh) {
    if (m.state.desired !== "running") await c.remote.putState(module, { ...m.state, desired: "running" });
    return { alive: true, pid: m.pid, adopted: true };
  }
  throwIfAborted(c.signal);
  await c.remote.stop(module, c.graceMs);
  return { ...(await startVerified(c, m.state, launch)), adopted: false };
}

/** Records the launch as desired, starts it and checks the process it started outlives the settle time. */
async function startVerified(c: RemoteControl, state: RemoteRunState, launch: Launch): Promise<StartResult> {
  const { remote } = c;
  await remote.putState(launch.module, { ...state, desired: "running", version: launch.version, launchDigest: launchDigest(launch) });
  let pid: number;
  try {
    pid = await remote.start(launch, "run", c.signal);
  } catch (e) {
    if (!isProcessError(e) || e.code === "CANCELLED") throw e;
    return { alive: false, logTail: e.message };
  }
  await sleep(c.settleMs, c.signal ?? new AbortController().signal);
  throwIfAborted(c.signal);
  const now = await remote.inspect(launch.module);
  if (pid > 0 && now?.pid === pid) return { alive: true, pid };
  // Only this start's output: earlier runs wrote to the same log.
  const tail = await remote.tail(launch.module);
  const mark = tail.lastIndexOf(START_MARK);
  return { alive: false, logTail: mark >= 0 ? tail.slice(mark) : tail };
}

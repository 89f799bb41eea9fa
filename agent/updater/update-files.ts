// The files between the agent and skippy-updater (issue 36), all under `<stateDir>/updater/`:
//
//   versions/<version>-<sha256 first 12 hex>/skippy.mjs   a staged bundle (the executor writes it)
//   versions/<...>/manifest.json                        {version, sha256, size, signature}, written last
//   current, previous                                   symlinks to versions/<dir> (the updater switches them)
//   request.json                                        "run this version" (the executor writes it)
//   request.taken.json                                  the request the updater took (renamed, never rewritten)
//   state.json                                          where the updater's machine is (the updater writes it)
//   confirmed.json                                      {sha256, at}: the running agent reached the controller
//
// Every file is written whole (temp file, fsync, rename, fsync of the directory), so a reader sees
// the old content or the new. This module uses node: modules only: the updater imports it and
// must stay small and independent of the agent's modules.
import { createHash, randomBytes } from "node:crypto";
import { constants, createReadStream } from "node:fs";
import { mkdir, open, readFile, readlink, rename, symlink, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/** Env var the updater sets for its child: the updater directory. Set = the agent is supervised. */
export const UPDATER_DIR_ENV = "SKIPPY_UPDATER_DIR";
/** Env var the updater sets for its child: SHA-256 of the bundle the child runs. */
export const BUNDLE_SHA256_ENV = "SKIPPY_BUNDLE_SHA256";

export const REQUEST_SCHEMA = "skippy-update-request/v1";
export const STATE_SCHEMA = "skippy-updater-state/v1";

/** A version as bundles state it ("// skippy-bundle-version: X"). */
export const VERSION_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
/** A SHA-256, lowercase hex. */
export const SHA256_PATTERN = /^[0-9a-f]{64}$/;

/** The bundle's file name inside a version directory. */
export const BUNDLE_FILE = "skippy.mjs";
export const MANIFEST_FILE = "manifest.json";

/** The updater's directory for an agent's --state-dir. */
export function updaterDirOf(stateDir: string): string {
  return join(stateDir, "updater");
}

/** Every path of the updater directory `dir`. */
export function updaterPaths(dir: string) {
  return {
    dir,
    versions: join(dir, "versions"),
    current: join(dir, "current"),
    previous: join(dir, "previous"),
    request: join(dir, "request.json"),
    requestTaken: join(dir, "request.taken.json"),
    state: join(dir, "state.json"),
    confirmed: join(dir, "confirmed.json"),
  };
}

/** One version of the bundle, named by what it states and by its bytes. */
export interface VersionRef {
  version: string;
  sha256: string;
}

/** versions/<dir>/manifest.json: what the controller signed. */
export interface BundleManifest extends VersionRef {
  size: number;
  /** The controller's Ed25519 signature (base64), as AgentVersionSpec.signature; "" for a seeded bundle. */
  signature: string;
}

/** request.json: switch to the staged version `dir`. */
export interface UpdateRequest extends VersionRef {
  schema: typeof REQUEST_SCHEMA;
  /** The version directory's name under versions/ (versionDirName(version, sha256)). */
  dir: string;
  /** How long the new agent has, from its start, to write confirmed.json before the updater goes back. */
  deadlineMs: number;
  /** The update_agent order that asked for it ("" when none). */
  orderId: string;
  /** ISO time the executor wrote it. */
  requestedAt: string;
}

export const UPDATER_STATES = ["IDLE", "STAGED", "SWITCHING", "STARTING", "CONFIRMED", "ROLLING_BACK", "ROLLED_BACK", "FAILED"] as const;
/** The updater's states, as AgentUpdateState names them without the prefix. */
export type UpdaterStateName = (typeof UPDATER_STATES)[number];

/** state.json: where the updater is (written by the updater only). */
export interface UpdaterStateFile {
  schema: typeof STATE_SCHEMA;
  state: UpdaterStateName;
  /** The version the last update went to (or tried to); absent before any update. */
  target?: VersionRef;
  /** The version before it. */
  previous?: VersionRef;
  /** What runs now (the version "current" points at). */
  running?: VersionRef;
  /** Why, in a sentence (ROLLED_BACK, FAILED), or what happens. */
  message: string;
  /** ISO time of the last change of state. */
  changedAt: string;
  /** The request in progress: its deadline and order (so an updater that restarts can resume it). */
  deadlineMs?: number;
  orderId?: string;
}

/** confirmed.json: the agent running bundle `sha256` reached the controller at `at` (ISO). */
export interface ConfirmedFile {
  sha256: string;
  at: string;
}

/** A file of the updater directory that is not what its schema says. */
export class UpdateFileError extends Error {
  override name = "UpdateFileError";
}

/** The version directory's name: `<version>-<sha256 first 12 hex>`. */
export function versionDirName(version: string, sha256: string): string {
  if (!VERSION_PATTERN.test(version)) throw new UpdateFileError(`version ${JSON.stringify(version)} is not [A-Za-z0-9._-]{1,64}`);
  if (!SHA256_PATTERN.test(sha256)) throw new UpdateFileError(`sha256 ${JSON.stringify(sha256)} is not 64 lowercase hex digits`);
  return `${version}-${sha256.slice(0, 12)}`;
}

/** The version a bundle states in its first lines ("// skippy-bundle-version: X"), if any. */
export function bundleVersionOf(head: Uint8Array): string | undefined {
  const v = /^\/\/ skippy-bundle-version: (\S+)$/m.exec(Buffer.from(head.subarray(0, 1024)).toString("latin1"))?.[1];
  return v !== undefined && VERSION_PATTERN.test(v) ? v : undefined;
}

/** SHA-256 (lowercase hex) of a file's bytes. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Replaces `path` with `data`: temp file beside it, fsync, rename, fsync of the directory. */
export async function writeFileWhole(path: string, data: Uint8Array | string, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    await fh.writeFile(data);
    await fh.chmod(mode);
    await fh.sync();
    await fh.close();
    await rename(tmp, path);
  } catch (e) {
    await fh.close().catch(() => undefined);
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  await syncDir(dir);
}

/** Makes a rename or a new entry in `dir` durable. */
export async function syncDir(dir: string): Promise<void> {
  const d = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** Writes `value` as JSON, whole. */
export async function writeJsonWhole(path: string, value: unknown): Promise<void> {
  await writeFileWhole(path, `${JSON.stringify(value, null, 2)}\n`);
}

/** The parsed JSON at `path`; undefined when the file does not exist. */
async function readJson(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UpdateFileError(`${path}: not JSON: ${(e as Error).message}`);
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function versionRefOf(v: unknown, what: string): VersionRef {
  if (!isRecord(v) || typeof v.version !== "string" || typeof v.sha256 !== "string") {
    throw new UpdateFileError(`${what}: needs version and sha256 strings`);
  }
  if (!VERSION_PATTERN.test(v.version))
    throw new UpdateFileError(`${what}: version ${JSON.stringify(v.version)} is not [A-Za-z0-9._-]{1,64}`);
  if (!SHA256_PATTERN.test(v.sha256)) throw new UpdateFileError(`${what}: sha256 is not 64 lowercase hex digits`);
  return { version: v.version, sha256: v.sha256 };
}

/** Checks a parsed request.json; throws UpdateFileError saying what is wrong. */
export function parseUpdateRequest(v: unknown): UpdateRequest {
  if (!isRecord(v) || v.schema !== REQUEST_SCHEMA) throw new UpdateFileError(`request: schema is not ${REQUEST_SCHEMA}`);
  const ref = versionRefOf(v, "request");
  if (v.dir !== versionDirName(ref.version, ref.sha256))
    throw new UpdateFileError(`request: dir is not ${versionDirName(ref.version, ref.sha256)}`);
  if (typeof v.deadlineMs !== "number" || !Number.isInteger(v.deadlineMs) || v.deadlineMs < 1000 || v.deadlineMs > 3_600_000) {
    throw new UpdateFileError("request: deadlineMs is not a whole number of milliseconds from 1000 to 3600000");
  }
  if (typeof v.orderId !== "string") throw new UpdateFileError("request: orderId is not a string");
  if (typeof v.requestedAt !== "string" || Number.isNaN(Date.parse(v.requestedAt)))
    throw new UpdateFileError("request: requestedAt is not an ISO time");
  return { schema: REQUEST_SCHEMA, ...ref, dir: v.dir, deadlineMs: v.deadlineMs, orderId: v.orderId, requestedAt: v.requestedAt };
}

/** Checks a parsed manifest.json. */
export function parseManifest(v: unknown): BundleManifest {
  const ref = versionRefOf(v, "manifest");
  const r = v as Record<string, unknown>;
  if (typeof r.size !== "number" || !Number.isInteger(r.size) || r.size < 0)
    throw new UpdateFileError("manifest: size is not a whole number");
  if (typeof r.signature !== "string") throw new UpdateFileError("manifest: signature is not a string");
  return { ...ref, size: r.size, signature: r.signature };
}

/** Checks a parsed state.json. */
export function parseUpdaterState(v: unknown): UpdaterStateFile {
  if (!isRecord(v) || v.schema !== STATE_SCHEMA) throw new UpdateFileError(`state: schema is not ${STATE_SCHEMA}`);
  if (!UPDATER_STATES.includes(v.state as UpdaterStateName)) throw new UpdateFileError(`state: unknown state ${JSON.stringify(v.state)}`);
  const opt = (k: "target" | "previous" | "running") => (v[k] === undefined ? undefined : versionRefOf(v[k], `state.${k}`));
  return {
    schema: STATE_SCHEMA,
    state: v.state as UpdaterStateName,
    target: opt("target"),
    previous: opt("previous"),
    running: opt("running"),
    message: typeof v.message === "string" ? v.message : "",
    changedAt: typeof v.changedAt === "string" ? v.changedAt : "",
    deadlineMs: typeof v.deadlineMs === "number" ? v.deadlineMs : undefined,
    orderId: typeof v.orderId === "string" ? v.orderId : undefined,
  };
}

/** Checks a parsed confirmed.json. */
export function parseConfirmed(v: unknown): ConfirmedFile {
  if (!isRecord(v) || typeof v.sha256 !== "string" || !SHA256_PATTERN.test(v.sha256) || typeof v.at !== "string") {
    throw new UpdateFileError("confirmed: needs sha256 (64 lowercase hex) and at");
  }
  return { sha256: v.sha256, at: v.at };
}

/** request.json, checked; undefined when there is none. */
export async function readUpdateRequest(dir: string): Promise<UpdateRequest | undefined> {
  const v = await readJson(updaterPaths(dir).request);
  return v === undefined ? undefined : parseUpdateRequest(v);
}

/** Writes request.json whole (the executor, once the bundle is staged). */
export async function writeUpdateRequest(dir: string, req: Omit<UpdateRequest, "schema" | "dir">): Promise<UpdateRequest> {
  const full: UpdateRequest = { ...req, schema: REQUEST_SCHEMA, dir: versionDirName(req.version, req.sha256) };
  parseUpdateRequest(full);
  await writeJsonWhole(updaterPaths(dir).request, full);
  return full;
}

/**
 * Takes request.json: renames it to request.taken.json (the last taken request, for a human), so
 * the executor's next request is a new file, then reads what it took: renamed first, so a request
 * written meanwhile stays in request.json for the next look. Undefined when there was none; throws
 * UpdateFileError when the taken one does not hold together.
 */
export async function takeUpdateRequest(dir: string): Promise<UpdateRequest | undefined> {
  const p = updaterPaths(dir);
  try {
    await rename(p.request, p.requestTaken);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
  await syncDir(dir);
  const v = await readJson(p.requestTaken);
  if (v === undefined) throw new UpdateFileError("request: request.taken.json vanished after it was taken");
  return parseUpdateRequest(v);
}

/** state.json, checked; undefined when the updater has written none. */
export async function readUpdaterState(dir: string): Promise<UpdaterStateFile | undefined> {
  const v = await readJson(updaterPaths(dir).state);
  return v === undefined ? undefined : parseUpdaterState(v);
}

/** Writes state.json whole (the updater only). */
export async function writeUpdaterState(dir: string, state: Omit<UpdaterStateFile, "schema">): Promise<void> {
  await writeJsonWhole(updaterPaths(dir).state, { schema: STATE_SCHEMA, ...state });
}

/** confirmed.json, checked; undefined when there is none. */
export async function readConfirmed(dir: string): Promise<ConfirmedFile | undefined> {
  const v = await readJson(updaterPaths(dir).confirmed);
  return v === undefined ? undefined : parseConfirmed(v);
}

/** Writes confirmed.json whole (the agent, after the controller accepted its first heartbeat). */
export async function writeConfirmed(dir: string, sha256: string, at: Date = new Date()): Promise<void> {
  await writeJsonWhole(updaterPaths(dir).confirmed, { sha256, at: at.toISOString() } satisfies ConfirmedFile);
}

/** The manifest of version directory `versionDir`, checked; undefined when not (yet) written. */
export async function readManifest(dir: string, versionDir: string): Promise<BundleManifest | undefined> {
  const v = await readJson(join(updaterPaths(dir).versions, versionDir, MANIFEST_FILE));
  return v === undefined ? undefined : parseManifest(v);
}

/** The bundle's path in version directory `versionDir`. */
export function bundlePathOf(dir: string, versionDir: string): string {
  return join(updaterPaths(dir).versions, versionDir, BUNDLE_FILE);
}

/**
 * Stages a bundle: versions/<dir>/skippy.mjs, then manifest.json (written last: a directory with
 * a manifest is complete). Returns the version directory's name. Does not check the signature.
 */
export async function stageBundle(dir: string, bytes: Uint8Array, manifest: BundleManifest): Promise<string> {
  const name = versionDirName(manifest.version, manifest.sha256);
  const vdir = join(updaterPaths(dir).versions, name);
  await mkdir(vdir, { recursive: true });
  await writeFileWhole(join(vdir, BUNDLE_FILE), bytes, 0o644);
  await writeJsonWhole(join(vdir, MANIFEST_FILE), parseManifest(manifest));
  await syncDir(updaterPaths(dir).versions);
  return name;
}

/** The version directory `current` or `previous` points at; undefined when the link is absent. */
export async function readVersionLink(dir: string, link: "current" | "previous"): Promise<string | undefined> {
  try {
    return basename(await readlink(updaterPaths(dir)[link]));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** Points `current` or `previous` at versions/<versionDir>: a new link at a temp name renamed over the old one. */
export async function switchVersionLink(dir: string, link: "current" | "previous", versionDir: string): Promise<void> {
  const p = updaterPaths(dir);
  const tmp = join(dir, `.${link}.${randomBytes(6).toString("hex")}.tmp`);
  await symlink(join("versions", versionDir), tmp);
  try {
    await rename(tmp, p[link]);
  } catch (e) {
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  await syncDir(dir);
}

// The upload_files executor: writes the order's files under one base directory, each atomically.
//
//   base: <work_dir>/tenants/<tenant>/ when the order names a tenant, else <work_dir>/files/
//   1. every file's path, mode and owner are checked before anything is written  -> UPLOAD_INVALID
//   2. every file's content matches its sha256                                   -> CHECKSUM_MISMATCH
//   3. no existing directory on any path leads out of the base (symlinks are resolved and must
//      stay inside it)                                                           -> UPLOAD_INVALID
//   4. each file: temp file (O_EXCL) in its directory, write, chown, chmod, fsync, rename over the
//      old one, fsync the directory. The rename replaces a symlink at the final name instead of
//      writing through it. A file that already has the content, mode and owner is left alone.
//                                                                     -> UPLOAD_OK, UPLOAD_FAILED
// Steps 1-3 are all or nothing; a failure while writing (say, EPERM on chown) leaves the files
// before it written, and the result lists them.
import { createHash } from "node:crypto";
import { lstat, mkdir, readFile, realpath } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { FileWrittenSchema, type FileUpload, type FileWritten } from "../../gen/skipper/v1/order_action_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import { isInside, OutsideBaseError, writeFileAtomic } from "../engine/durable-file.js";
import { uploadPathProblem } from "../../common/action-rules.js";
import { executorOf, orderOutcome } from "./executor.js";

const DEFAULT_MODE = 0o644;

interface Plan {
  rel: string;
  dirs: string[];
  name: string;
  content: Uint8Array;
  sha256: string;
  mode: number;
  uid?: number;
  gid?: number;
}

/** A refusal found while checking or writing: the order asked for something it may not have. */
class Refused extends Error {}

/** Writes the order's files; never throws for a failure of the order itself. */
export const uploadFiles = executorOf("uploadFiles", async (action, order, ctx) => {
  const started = performance.now();
  const written: FileWritten[] = [];
  const done = (code: string, message: string) =>
    orderOutcome(code, message, started, { success: code === "UPLOAD_OK", details: { files: written } });
  const files = action?.files ?? [];
  if (files.length === 0) return done("UPLOAD_INVALID", "the order carries no files (action.upload_files.files)");
  const tenantId = order.target?.tenantId ?? "";
  if (tenantId !== "" && !ID_PATTERN.test(tenantId))
    return done("UPLOAD_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  const base = tenantId ? join(ctx.config.workDir, "tenants", tenantId) : join(ctx.config.workDir, "files");

  // 1 and 2: the order itself, every file before any is written.
  const plans: Plan[] = [];
  const accounts = new Accounts();
  try {
    for (const f of files) plans.push(await plan(f, tenantId !== "", accounts));
  } catch (e) {
    if (e instanceof Refused) return done("UPLOAD_INVALID", e.message);
    throw e;
  }
  const dup = plans.find((p, i) => plans.findIndex((q) => q.rel === p.rel) !== i);
  if (dup) return done("UPLOAD_INVALID", `${JSON.stringify(dup.rel)} appears twice in the order`);
  for (const p of plans) {
    const actual = sha256(p.content);
    if (actual !== p.sha256)
      return done("CHECKSUM_MISMATCH", `${p.rel}: content has sha256 ${actual}, the order says ${p.sha256}; nothing written`);
  }

  // 3 and 4: where the files go, then the files.
  try {
    // A tenant's project directory is private, as deploy_service makes it.
    await mkdir(base, { recursive: true, mode: tenantId ? 0o700 : 0o755 });
    const realBase = await realpath(base);
    for (const p of plans) await walkDirs(realBase, p, false);
    for (const p of plans) {
      if (ctx.signal.aborted) return done("CANCELLED", `cancelled after ${written.length} of ${plans.length} file(s)`);
      written.push(await writeOne(await walkDirs(realBase, p, true), p, realBase));
    }
  } catch (e) {
    if (e instanceof Refused) return done("UPLOAD_INVALID", `${e.message}; ${written.length} file(s) written before`);
    const err = e as NodeJS.ErrnoException;
    return done("UPLOAD_FAILED", `${err.code ?? "error"}: ${err.message} (${written.length} of ${plans.length} file(s) written)`);
  }
  const changed = written.filter((w) => w.changed).length;
  return done("UPLOAD_OK", `${written.length} file(s) under ${base}, ${changed} changed`);
});

async function plan(f: FileUpload, projectDir: boolean, accounts: Accounts): Promise<Plan> {
  const rel = f.path;
  const segs = rel.split("/");
  const bad = (why: string) => new Refused(`path ${JSON.stringify(rel.slice(0, 200))} ${why}`);
  // The controller's rules (relative, normalised, no '..', not the agent's own files), checked
  // again here: the agent trusts no one with its host.
  const problem = uploadPathProblem(rel, projectDir);
  if (problem) throw bad(problem);
  if (segs.some((s) => Buffer.byteLength(s) > 255)) throw bad("has a name longer than 255 bytes");
  const mode = f.mode === 0 ? DEFAULT_MODE : f.mode;
  if ((mode & ~0o7777) !== 0) throw new Refused(`${rel}: mode ${mode.toString(8)} has bits beyond the permission bits (07777)`);
  if ((mode & 0o6000) !== 0) throw new Refused(`${rel}: setuid and setgid modes are refused (${mode.toString(8)})`);
  if (!/^[0-9a-f]{64}$/i.test(f.sha256)) throw new Refused(`${rel}: sha256 must be 64 hex digits`);
  const uid = f.owner ? await accounts.id("passwd", f.owner) : undefined;
  const gid = f.group ? await accounts.id("group", f.group) : undefined;
  return { rel, dirs: segs.slice(0, -1), name: segs[segs.length - 1]!, content: f.content, sha256: f.sha256.toLowerCase(), mode, uid, gid };
}

// Follows the file's directories from the base's real path, one at a time, resolving each that
// exists and requiring it to stay inside the base. Without `create` it only checks (a missing
// directory ends the walk: what would be made under it is inside); with `create` it makes the
// missing ones (mkdir never follows a symlink at the name it creates) and returns the real path
// of the file's directory.
async function walkDirs(realBase: string, p: Plan, create: boolean): Promise<string> {
  let cur = realBase;
  for (const seg of p.dirs) {
    const next = join(cur, seg);
    if (create)
      await mkdir(next, { mode: 0o755 }).catch((e: NodeJS.ErrnoException) => (e.code === "EEXIST" ? undefined : Promise.reject(e)));
    else if (!(await exists(next))) return cur;
    const real = await realpath(next);
    if (!isInside(realBase, real)) {
      throw new Refused(`path ${JSON.stringify(p.rel)} leads out of the base directory through a symlink (to ${real})`);
    }
    if (!(await lstat(real)).isDirectory()) throw new Refused(`path ${JSON.stringify(p.rel)}: ${seg} is not a directory`);
    cur = real;
  }
  const last = await lstat(join(cur, p.name)).catch(() => undefined);
  if (last?.isDirectory()) throw new Refused(`path ${JSON.stringify(p.rel)} is an existing directory`);
  return cur;
}

async function writeOne(dir: string, p: Plan, realBase: string): Promise<FileWritten> {
  const path = join(dir, p.name);
  const result = (changed: boolean) =>
    create(FileWrittenSchema, { path, sha256: p.sha256, mode: p.mode, size: BigInt(p.content.length), changed });
  const old = await lstat(path).catch(() => undefined);
  const same =
    old?.isFile() &&
    old.size === p.content.length &&
    (old.mode & 0o7777) === p.mode &&
    (p.uid === undefined || old.uid === p.uid) &&
    (p.gid === undefined || old.gid === p.gid) &&
    sha256(await readFile(path)) === p.sha256;
  if (same) return result(false);
  try {
    await writeFileAtomic(path, p.content, { mode: p.mode, uid: p.uid, gid: p.gid, within: realBase });
  } catch (e) {
    if (e instanceof OutsideBaseError) throw new Refused(e.message);
    throw e;
  }
  return result(true);
}

// User and group names from /etc/passwd and /etc/group (read once per order), or numbers.
class Accounts {
  private tables = new Map<string, Map<string, number>>();

  async id(table: "passwd" | "group", nameOrId: string): Promise<number> {
    if (/^\d{1,10}$/.test(nameOrId) && Number(nameOrId) < 0xffffffff) return Number(nameOrId);
    const kind = table === "passwd" ? "owner" : "group";
    if (!/^[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?$/.test(nameOrId))
      throw new Refused(`${kind} ${JSON.stringify(nameOrId.slice(0, 80))} is not a name or number`);
    let ids = this.tables.get(table);
    if (!ids) {
      ids = new Map();
      const text = await readFile(`/etc/${table}`, "utf8").catch(() => "");
      for (const line of text.split("\n")) {
        const [name, , id] = line.split(":");
        if (name && id && /^\d+$/.test(id) && !ids.has(name)) ids.set(name, Number(id));
      }
      this.tables.set(table, ids);
    }
    const id = ids.get(nameOrId);
    if (id === undefined) throw new Refused(`${kind} ${JSON.stringify(nameOrId)} is not known on this node (/etc/${table})`);
    return id;
  }
}

function sha256(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

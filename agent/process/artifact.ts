// Getting a process artifact onto the node and into a directory: copied from an absolute local
// path or downloaded over http(s), hashed while it streams (with a size cap, so a wrong URL cannot
// fill the disk), checked against the order's sha256, then unpacked (.tar.gz / .tgz) or installed
// as a single executable. Archives are listed before they are unpacked and refused when an entry
// could land outside the target: an absolute name, a `..` component, or (after unpacking) a
// symlink or special file leading elsewhere.
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { chmod, copyFile, lstat, readdir, readFile, realpath } from "node:fs/promises";
import { basename, join, sep } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ProcessSource } from "../../gen/skipper/v1/process_pb.js";
import { runCommand } from "../engine/run-command.js";
import { ProcessError, VERSION_PATTERN, throwIfAborted } from "./layout.js";

export interface FetchOptions {
  signal?: AbortSignal;
  /** Largest artifact accepted (default 512 MiB). */
  maxBytes?: number;
  /** Limit for one download (default 5 minutes). */
  timeoutMs?: number;
}

export interface FetchedArtifact {
  /** Where the artifact was written. */
  file: string;
  /** The name it is installed under when it is a single executable. */
  name: string;
  tarball: boolean;
  sha256: string;
  bytes: number;
}

const TARBALL = /\.(tar\.gz|tgz)$/i;
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;
const TAR_TIMEOUT_MS = 120_000;

/** Where the source is, for messages. */
export function describeSource(source: ProcessSource | undefined): string {
  return source?.kind.case ? `${source.kind.case} ${source.kind.value}` : "no source";
}

/**
 * Copies or downloads the artifact into `destDir` and hashes it. Throws SOURCE_UNAVAILABLE when
 * it cannot be had (missing file, network error, non-2xx), PROCESS_INVALID when it is too large or
 * badly named, CANCELLED when the signal aborts.
 */
export async function fetchArtifact(source: ProcessSource | undefined, destDir: string, opts: FetchOptions = {}): Promise<FetchedArtifact> {
  const maxBytes = opts.maxBytes ?? 512 * 1024 * 1024;
  const kind = source?.kind;
  if (!kind?.case) throw new ProcessError("PROCESS_INVALID", "the process spec has no source (path or url)");
  const name = kind.case === "path" ? basename(kind.value) : basename(new URL(kind.value).pathname);
  if (!FILE_NAME.test(name)) throw new ProcessError("PROCESS_INVALID", `artifact name ${JSON.stringify(name)} is not a plain file name`);
  const file = join(destDir, `artifact-${name}`);
  let body: Readable;
  if (kind.case === "path") {
    body = await openLocal(kind.value);
  } else {
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? 300_000);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    let res: Response;
    try {
      res = await fetch(kind.value, { signal, redirect: "follow" });
    } catch (e) {
      throwIfAborted(opts.signal);
      throw new ProcessError("SOURCE_UNAVAILABLE", `cannot download ${kind.value}: ${causeOf(e)}`);
    }
    if (!res.ok || !res.body) throw new ProcessError("SOURCE_UNAVAILABLE", `cannot download ${kind.value}: HTTP ${res.status}`);
    const length = Number(res.headers.get("content-length") ?? 0);
    if (length > maxBytes) throw new ProcessError("PROCESS_INVALID", `artifact is ${length} bytes, more than the ${maxBytes} allowed`);
    body = Readable.fromWeb(res.body as Parameters<typeof Readable.fromWeb>[0], { signal });
  }
  const hash = createHash("sha256");
  let bytes = 0;
  try {
    await pipeline(
      body,
      async function* (chunks: AsyncIterable<Buffer>) {
        for await (const chunk of chunks) {
          bytes += chunk.length;
          if (bytes > maxBytes) throw new ProcessError("PROCESS_INVALID", `artifact is more than the ${maxBytes} bytes allowed`);
          hash.update(chunk);
          yield chunk;
        }
      },
      createWriteStream(file, { mode: 0o600 }),
      opts.signal ? { signal: opts.signal } : {},
    );
  } catch (e) {
    throwIfAborted(opts.signal);
    if (e instanceof ProcessError) throw e;
    throw new ProcessError("SOURCE_UNAVAILABLE", `cannot read ${describeSource(source)}: ${causeOf(e)}`);
  }
  return { file, name, tarball: TARBALL.test(name), sha256: hash.digest("hex"), bytes };
}

/** Throws CHECKSUM_MISMATCH unless the artifact hashes to `expected`. */
export function verifyChecksum(artifact: FetchedArtifact, expected: string): void {
  if (artifact.sha256 !== expected.toLowerCase()) {
    throw new ProcessError("CHECKSUM_MISMATCH", `artifact sha256 is ${artifact.sha256}, the order says ${expected.toLowerCase()}`);
  }
}

/** Unpacks a tarball into `dir` (empty), or installs a single file there as an executable. */
export async function unpackArtifact(artifact: FetchedArtifact, dir: string, signal?: AbortSignal): Promise<void> {
  if (!artifact.tarball) {
    await copyFile(artifact.file, join(dir, artifact.name));
    await chmod(join(dir, artifact.name), 0o755);
    return;
  }
  const list = await runCommand("tar", ["-tzf", artifact.file], { timeoutMs: TAR_TIMEOUT_MS, signal, uncapped: true });
  throwIfAborted(signal);
  if (list.exitCode !== 0)
    throw new ProcessError("PROCESS_INVALID", `artifact is not a readable .tar.gz: ${list.stderr.trim().slice(0, 300)}`);
  for (const entry of list.stdout.split("\n").filter(Boolean)) {
    if (entry.startsWith("/") || entry.split("/").includes("..")) {
      throw new ProcessError("PROCESS_INVALID", `archive entry ${JSON.stringify(entry)} would be written outside the version directory`);
    }
  }
  const x = await runCommand("tar", ["-xzf", artifact.file, "-C", dir, "--no-same-owner"], { timeoutMs: TAR_TIMEOUT_MS, signal });
  throwIfAborted(signal);
  if (x.exitCode !== 0) throw new ProcessError("PROCESS_INVALID", `unpacking the artifact failed: ${x.stderr.trim().slice(0, 300)}`);
  await checkTree(dir);
}

/** The version a tarball names in its root VERSION file (for "latest"). */
export async function readArtifactVersion(dir: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(join(dir, "VERSION"), "utf8");
  } catch {
    throw new ProcessError("PROCESS_INVALID", 'version "latest" needs a tarball with a VERSION file at its root');
  }
  const version = text.trim();
  if (!VERSION_PATTERN.test(version) || version === "latest" || version === "active") {
    throw new ProcessError(
      "PROCESS_INVALID",
      `the artifact's VERSION file says ${JSON.stringify(version.slice(0, 80))}, not a usable version`,
    );
  }
  return version;
}

// Every symlink must resolve inside the tree (tar has already refused `..` names, but a link can
// still point anywhere), and only files, directories and symlinks may be there.
async function checkTree(root: string): Promise<void> {
  const realRoot = await realpath(root);
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    const st = await lstat(path);
    if (st.isSymbolicLink()) {
      const target = await realpath(path).catch(() => "");
      if (target !== realRoot && !target.startsWith(realRoot + sep)) {
        throw new ProcessError(
          "PROCESS_INVALID",
          `archive symlink ${path.slice(root.length + 1)} points outside the version directory (or nowhere)`,
        );
      }
    } else if (!st.isFile() && !st.isDirectory()) {
      throw new ProcessError("PROCESS_INVALID", `archive entry ${path.slice(root.length + 1)} is not a file, directory or symlink`);
    }
  }
}

async function openLocal(path: string): Promise<Readable> {
  const stream = createReadStream(path);
  // Surface a missing or unreadable file here, as SOURCE_UNAVAILABLE, rather than mid-pipeline.
  await new Promise<void>((resolve, reject) => {
    stream.once("open", () => resolve());
    stream.once("error", (e) => reject(new ProcessError("SOURCE_UNAVAILABLE", `cannot read ${path}: ${causeOf(e)}`)));
  });
  return stream;
}

function causeOf(e: unknown): string {
  const err = e as Error & { cause?: Error & { code?: string } };
  return (err.cause?.code ?? err.cause?.message ?? err.message ?? String(e)).slice(0, 200);
}

// A Git source's bare mirror: one per source, in a directory the caller names (the controller's
// `<data-dir>/git/<id>.git`), fetched on each sync and read without a work tree. `git` runs with an
// argument array (never a shell), a timeout, an environment of its own (no system or user config,
// no prompt, HOME the mirror) and only the transports allowed here: https and ssh, file (local
// paths and file://) only when the controller allows it. What a caller gives (a URL, a branch, a
// path, a commit) is checked before git sees it, and positional arguments follow `--`, so none can
// be read as an option. Errors are GitMirrorError: the URL with any userinfo hidden, and the last
// line git wrote to stderr. Calls on one mirror are the caller's to serialise (one sync at a time
// per source).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { redactText } from "../../common/logging/redact.js";

/** Why a mirror's call failed: refused before git ran, git failed, timed out, or the branch or object is not there. */
export type GitMirrorReason = "refused" | "failed" | "timeout" | "not_found";

/** A failed mirror call; its message names the URL (userinfo hidden) and what git said last. */
export class GitMirrorError extends Error {
  override readonly name = "GitMirrorError";
  constructor(
    readonly reason: GitMirrorReason,
    message: string,
  ) {
    super(message);
  }
}

/** Type guard for GitMirrorError (works across module copies). */
export function isGitMirrorError(e: unknown): e is GitMirrorError {
  return e instanceof Error && e.name === "GitMirrorError" && typeof (e as GitMirrorError).reason === "string";
}

/** A manifest file of a commit: its path in the repository and its blob. */
export interface TreeFile {
  path: string;
  blob: string;
  size: number;
}

export interface GitMirrorOptions {
  /** The bare repository's directory (created on the first fetch). */
  dir: string;
  /** Allow local paths and file:// URLs (tests, a repository on the controller's host). */
  allowFileUrls?: boolean;
  /** Per git call; default 60 s. */
  timeoutMs?: number;
  /** Most bytes one `read` returns; default 16 MiB. */
  maxReadBytes?: number;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_MAX_READ = 16 * 1024 * 1024;
const OBJECT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const MANIFEST_FILE = /\.(?:ya?ml|json)$/i;

/** `url` with the userinfo of a URL (`https://user:token@host/...`) hidden, and any other secret text. */
export function redactGitUrl(url: string): string {
  return redactText(url.replace(/\b([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/\s]*@/g, "$1[REDACTED]@"));
}

/** The transport git would use for `url`: a remote helper's (`ext::…`), a URL's scheme, ssh for `user@host:path`, else file (a local path). */
export function gitTransport(url: string): string {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*)(?:::|:\/\/)/.exec(url);
  if (scheme) return scheme[1]!.toLowerCase();
  // scp-like syntax: a colon before any slash, and not a Windows drive letter.
  return /^[^/:]{2,}:/.test(url) ? "ssh" : "file";
}

/** A bare mirror of one source's repository. */
export class GitMirror {
  private readonly dir: string;
  private readonly allowFile: boolean;
  private readonly timeoutMs: number;
  private readonly maxReadBytes: number;

  constructor(opts: GitMirrorOptions) {
    this.dir = opts.dir;
    this.allowFile = opts.allowFileUrls ?? false;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxReadBytes = opts.maxReadBytes ?? DEFAULT_MAX_READ;
  }

  /** Fetches `branch` of `url` into the mirror; returns the commit it points at. */
  async fetch(url: string, branch: string): Promise<string> {
    this.checkUrl(url);
    checkBranch(branch);
    const where = `${redactGitUrl(url)} (branch ${branch})`;
    if (!existsSync(join(this.dir, "HEAD"))) {
      await this.git(["-c", "init.defaultBranch=main", "init", "--bare", "--quiet", "--", this.dir], `creating the mirror of ${where}`, {
        noGitDir: true,
      });
    }
    const ref = `refs/heads/${branch}`;
    const fetched = await this.git(
      ["fetch", "--prune", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head", "--", url, `+${ref}:${ref}`],
      `fetching ${where}`,
      { url, allowFail: true },
    );
    if (fetched.failed) {
      const line = lastLine(fetched.stderr, url);
      const missing = /couldn't find remote ref/i.test(fetched.stderr);
      throw new GitMirrorError(missing ? "not_found" : "failed", `fetching ${where} failed: ${missing ? `no branch ${branch}` : line}`);
    }
    const rev = await this.git(["rev-parse", "--verify", "--quiet", `${ref}^{commit}`], `reading ${where}`);
    return rev.stdout.trim();
  }

  /** The .yaml, .yml and .json files of `commit` under `path` (a directory; "" the root), sorted by path. */
  async files(commit: string, path: string): Promise<TreeFile[]> {
    checkObject(commit, "commit");
    const dir = checkTreePath(path);
    const args = ["ls-tree", "-r", "-z", "--long", "--full-tree", commit, "--", ...(dir ? [`${dir}/`] : [])];
    const out = await this.git(args, `listing ${dir || "the root"} of ${commit}`);
    const files: TreeFile[] = [];
    for (const entry of out.stdout.split("\0")) {
      // <mode> SP <type> SP <object> SP+ <size> TAB <path>
      const m = /^(\d+) (\w+) ([0-9a-f]+) +(\d+|-)\t(.*)$/s.exec(entry);
      if (m?.[2] !== "blob" || m[1] === "120000") continue; // trees, submodules, symbolic links
      const file = m[5]!;
      if (dir && !file.startsWith(`${dir}/`)) continue;
      if (MANIFEST_FILE.test(file)) files.push({ path: file, blob: m[3]!, size: Number(m[4]) });
    }
    return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  }

  /** The texts (UTF-8) of `blobs`, by blob id, read in one `git cat-file --batch`. */
  async read(blobs: readonly string[]): Promise<Map<string, string>> {
    const wanted = [...new Set(blobs)];
    for (const b of wanted) checkObject(b, "blob");
    const texts = new Map<string, string>();
    if (wanted.length === 0) return texts;
    const out = await this.git(["cat-file", "--batch"], `reading ${wanted.length} files`, {
      input: `${wanted.join("\n")}\n`,
      binary: true,
    });
    const buf = out.raw;
    let at = 0;
    for (const id of wanted) {
      const eol = buf.indexOf(10, at);
      const header = buf.subarray(at, eol < 0 ? buf.length : eol).toString("utf8");
      const m = /^([0-9a-f]+) (\w+) (\d+)$/.exec(header);
      if (!m || m[1] !== id) throw new GitMirrorError("not_found", `blob ${id} is not in the mirror (${header})`);
      const start = eol + 1;
      const end = start + Number(m[3]);
      texts.set(id, buf.subarray(start, end).toString("utf8"));
      at = end + 1;
    }
    return texts;
  }

  /** The paths under `path` that differ between two commits (added, changed, deleted); undefined when `from` is not in the mirror. */
  async changedSince(from: string, to: string, path: string): Promise<string[] | undefined> {
    checkObject(from, "commit");
    checkObject(to, "commit");
    const dir = checkTreePath(path);
    const known = await this.git(["cat-file", "-e", `${from}^{commit}`], `looking up ${from}`, { allowFail: true });
    if (known.failed) return undefined;
    const args = ["diff-tree", "-r", "-z", "--no-renames", "--name-only", from, to, "--", ...(dir ? [`${dir}/`] : [])];
    const out = await this.git(args, `comparing ${from} with ${to}`);
    return out.stdout.split("\0").filter((p) => p !== "" && (!dir || p.startsWith(`${dir}/`)));
  }

  private checkUrl(url: string): void {
    if (url === "" || url.startsWith("-") || /\s/.test(url) || hasControl(url)) {
      throw new GitMirrorError(
        "refused",
        `the URL ${JSON.stringify(redactGitUrl(url))} is refused: empty, a leading '-' or a control character`,
      );
    }
    const transport = gitTransport(url);
    const allowed = ["https", "ssh", ...(this.allowFile ? ["file"] : [])];
    if (!allowed.includes(transport)) {
      throw new GitMirrorError(
        "refused",
        `the URL ${redactGitUrl(url)} is refused: transport ${transport} is not allowed (${allowed.join(", ")}${this.allowFile ? "" : "; file only with --allow-git-file-urls"})`,
      );
    }
  }

  // One git call. `failed` only with allowFail; otherwise a failure throws, naming `what`.
  private async git(
    args: string[],
    what: string,
    opts: { url?: string; allowFail?: boolean; input?: string; binary?: boolean; noGitDir?: boolean } = {},
  ): Promise<{ failed: boolean; stdout: string; stderr: string; raw: Buffer }> {
    const protocols = ["-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.ssh.allow=always"];
    if (this.allowFile) protocols.push("-c", "protocol.file.allow=always");
    const settings = ["-c", "gc.autoDetach=false", "-c", "core.sshCommand=ssh -o BatchMode=yes"];
    const argv = [...protocols, ...settings, "--literal-pathspecs", ...(opts.noGitDir ? [] : [`--git-dir=${this.dir}`]), ...args];
    // Its own process group, killed whole at the timeout: git runs transports (git-remote-https,
    // ssh) as children that would keep the pipes open after git itself was stopped.
    const child = execa("git", argv, {
      reject: false,
      detached: true,
      env: {
        GIT_TERMINAL_PROMPT: "0",
        GIT_CONFIG_NOSYSTEM: "1",
        GIT_CONFIG_GLOBAL: "/dev/null",
        HOME: this.dir,
        PATH: process.env.PATH ?? "",
      },
      extendEnv: false,
      stripFinalNewline: false,
      maxBuffer: this.maxReadBytes,
      encoding: "buffer",
      ...(opts.input !== undefined ? { input: opts.input } : { stdin: "ignore" as const }),
    });
    let timedOut = false;
    let hardKill: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child.pid, "SIGTERM");
      hardKill = setTimeout(() => killGroup(child.pid, "SIGKILL"), 5000);
    }, this.timeoutMs);
    const r = await child;
    clearTimeout(timer);
    clearTimeout(hardKill);
    const raw = Buffer.from(r.stdout as Uint8Array);
    const stderr = Buffer.from((r.stderr as Uint8Array | undefined) ?? new Uint8Array()).toString("utf8");
    const failed = r.failed === true;
    if (timedOut) throw new GitMirrorError("timeout", `${what} timed out after ${this.timeoutMs / 1000} s`);
    if ((r as { code?: string }).code === "ENOENT") throw new GitMirrorError("failed", `${what} failed: git is not installed`);
    if ((r as { isMaxBuffer?: boolean }).isMaxBuffer)
      throw new GitMirrorError("failed", `${what} failed: more than ${this.maxReadBytes} bytes`);
    if (failed && !opts.allowFail) throw new GitMirrorError("failed", `${what} failed: ${lastLine(stderr, opts.url)}`);
    return { failed, stdout: opts.binary ? "" : raw.toString("utf8"), stderr, raw };
  }
}

function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}

// The last line git wrote, with the URL's userinfo (and any secret text) hidden.
function lastLine(stderr: string, url: string | undefined): string {
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  let line = lines.at(-1) ?? "git said nothing";
  if (url) line = line.split(url).join(redactGitUrl(url));
  return redactGitUrl(line);
}

// A control character (below space, or DEL): never in a URL, branch or path git is given.
function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

function checkBranch(branch: string): void {
  // git check-ref-format's rules, plus no leading '-': a name git cannot mistake for an option.
  const bad =
    branch === "" ||
    branch.startsWith("-") ||
    branch.startsWith("/") ||
    branch.endsWith("/") ||
    branch.endsWith(".") ||
    branch.endsWith(".lock") ||
    branch.includes("..") ||
    branch.includes("@{") ||
    branch.includes("//") ||
    branch === "@" ||
    /[ ~^:?*[\\]/.test(branch) ||
    hasControl(branch) ||
    branch.split("/").some((c) => c.startsWith("."));
  if (bad) throw new GitMirrorError("refused", `the branch ${JSON.stringify(branch)} is refused: not a valid branch name`);
}

function checkObject(id: string, what: string): void {
  if (!OBJECT_ID.test(id)) throw new GitMirrorError("refused", `the ${what} ${JSON.stringify(id)} is refused: not a full object id`);
}

// A directory of the repository: relative, without '.' or '..' components; "" (or "." or "/") the root.
function checkTreePath(path: string): string {
  const trimmed = path.replace(/^\.?\/+/, "").replace(/\/+$/, "");
  if (trimmed === "" || trimmed === ".") return "";
  const parts = trimmed.split("/");
  if (trimmed.startsWith("-") || parts.some((p) => p === "" || p === "." || p === "..") || hasControl(trimmed)) {
    throw new GitMirrorError("refused", `the path ${JSON.stringify(path)} is refused: a relative directory without '.' or '..'`);
  }
  return trimmed;
}

// `skippy install`: sets a host up to run skippy as a systemd service, from the one-file bundle
// it runs as (npm run bundle:agent). It writes the bundle's copy, the node token (0600), the
// controller's CA, the environment file and skippy.service, each atomically with its mode, unit
// last so it never names a file that is not there yet. The input is checked in full first
// (install-options.ts), so bad input writes nothing; a file whose bytes and mode are already
// right is left alone, so running it again changes nothing. It never calls systemctl: it prints
// what to run. The token is never printed.
import { readFileSync } from "node:fs";
import { mkdir, readFile, stat, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "./engine/durable-file.js";
import { INSTALL_USAGE, parseInstall, type InstallContext, type InstallRequest } from "./install-options.js";
import { environmentFileText, UNIT_NAME, unitText } from "./service-unit.js";

/** Defined as true by scripts/bundle-agent.mjs: this program is the one-file bundle. */
declare const __SKIPPY_BUNDLE__: boolean | undefined;

/** One file install owns, and how a dry run shows it. */
interface PlannedFile {
  path: string;
  mode: number;
  data: Buffer;
  /** For a dry run: the content itself (not secret), or what it is. */
  show: { text: string } | { about: string };
}

/** What `skippy install` needs from the process: injected by tests. */
export interface InstallDeps extends InstallContext {
  /** The bundle file this program runs from; undefined when it is not the bundle. */
  bundle: string | undefined;
  out(text: string): void;
}

/** Runs `skippy install` with `argv` (after "install"); returns the process's exit code. */
export async function installCommand(argv: string[], deps: InstallDeps = processDeps()): Promise<number> {
  let request: InstallRequest | "help";
  try {
    request = parseInstall(argv, deps);
    if (request !== "help" && !deps.bundle)
      throw new Error(
        "install copies the one-file bundle it runs from: build it with `npm run bundle:agent` and run `node dist/skippy.mjs install …`",
      );
  } catch (e) {
    process.stderr.write(`skippy install: ${(e as Error).message}\n(skippy install --help lists the options)\n`);
    return 2;
  }
  if (request === "help") {
    deps.out(INSTALL_USAGE);
    return 0;
  }
  let outcome: Outcome;
  try {
    outcome = await installFiles(request, deps.readFile(deps.bundle!), deps.out);
  } catch (e) {
    process.stderr.write(`skippy install: ${(e as Error).message}\n`);
    return 1;
  }
  deps.out(request.dryRun ? "\nDry run: nothing was written.\n" : nextSteps(join(request.paths.unitDir, UNIT_NAME), outcome));
  return 0;
}

/** What an install did as a whole: every file new, any file changed, or none. */
export type Outcome = "created" | "updated" | "unchanged";

/** Writes (or, dry, describes) the files of `request` with `bundle` as the service's copy; says what that changed. */
export function installFiles(request: InstallRequest, bundle: Buffer, out: (text: string) => void): Promise<Outcome> {
  return apply(plan(request, bundle), request.ca ? [] : [join(request.paths.configDir, "ca.crt")], request.dryRun, out);
}

/** What to run after an install: install never calls systemctl itself. */
function nextSteps(unit: string, outcome: Outcome): string {
  return [
    "",
    outcome === "unchanged" ? "Nothing changed. To run it, as root:" : "Next, as root:",
    "  systemctl daemon-reload && systemctl enable --now skippy",
    ...(outcome === "updated" ? ["  systemctl restart skippy      # when it was running: it reads the changed files as it starts"] : []),
    "  journalctl -u skippy -f       # its log (JSON lines)",
    ...(unit === `/etc/systemd/system/${UNIT_NAME}` ? [] : [`(systemd reads units from /etc/systemd/system; this one is ${unit})`]),
    "",
  ].join("\n");
}

/** The files of an install, in the order they are written. */
function plan(req: InstallRequest, bundle: Buffer): PlannedFile[] {
  const { configDir, binDir, unitDir, node } = req.paths;
  const envFile = join(configDir, "skippy.env");
  const bundleCopy = join(binDir, "skippy.mjs");
  const env = environmentFileText(req.env);
  const unit = unitText({ node, bundle: bundleCopy, environmentFile: envFile });
  return [
    { path: bundleCopy, mode: 0o755, data: bundle, show: { about: `the skippy bundle (${bundle.length} bytes)` } },
    {
      path: (req.enroll ? req.env.SKIPPY_ENROLL_TOKEN_FILE : req.env.SKIPPY_NODE_TOKEN_FILE)!,
      mode: 0o600,
      data: Buffer.from(`${req.token}\n`),
      show: { about: req.enroll ? "the enrollment token (not shown)" : "the node token (not shown)" },
    },
    ...(req.ca ? [{ path: req.env.SKIPPY_CA_FILE!, mode: 0o644, data: req.ca, show: { about: "the controller's CA certificate" } }] : []),
    { path: envFile, mode: 0o644, data: Buffer.from(env), show: { text: env } },
    { path: join(unitDir, UNIT_NAME), mode: 0o644, data: Buffer.from(unit), show: { text: unit } },
  ];
}

/** Writes (or, dry, describes) `files` and removes `remove`, and says what that changed. */
async function apply(files: PlannedFile[], remove: string[], dryRun: boolean, out: (s: string) => void): Promise<Outcome> {
  const would = dryRun ? "would be " : "";
  const states = new Set<Outcome>();
  for (const f of files) {
    const state = await compare(f);
    states.add(state);
    const mode = `0${f.mode.toString(8)}`;
    if (state === "unchanged") {
      out(`unchanged ${f.path} (${mode})\n`);
      continue;
    }
    if (dryRun) {
      out(`${would}${state} ${f.path} (${mode})${"about" in f.show ? `: ${f.show.about}\n` : `:\n${indent(f.show.text)}`}`);
      continue;
    }
    await mkdir(dirname(f.path), { recursive: true, mode: 0o755 });
    await writeFileAtomic(f.path, f.data, { mode: f.mode });
    out(`${state} ${f.path} (${mode})\n`);
  }
  for (const path of remove) {
    if ((await stat(path).catch(() => undefined)) === undefined) continue;
    states.add("updated");
    if (!dryRun) await unlink(path);
    out(`${would}removed ${path} (no --ca-file given)\n`);
  }
  return states.has("updated") ? "updated" : states.has("created") ? "created" : "unchanged";
}

/** Whether writing `f` would create the file, update it, or leave it as it is. */
async function compare(f: PlannedFile): Promise<"created" | "updated" | "unchanged"> {
  const [info, data] = await Promise.all([stat(f.path).catch(() => undefined), readFile(f.path).catch(() => undefined)]);
  if (!info) return "created";
  return data?.equals(f.data) && (info.mode & 0o7777) === f.mode ? "unchanged" : "updated";
}

function indent(text: string): string {
  return text.replace(/^(?=.)/gm, "    ");
}

/** The bundle file this program runs from; undefined when it is not the bundle (dist/agent/main.js). */
export function ownBundleFile(): string | undefined {
  return typeof __SKIPPY_BUNDLE__ !== "undefined" && __SKIPPY_BUNDLE__ ? fileURLToPath(import.meta.url) : undefined;
}

function processDeps(): InstallDeps {
  return {
    uid: process.getuid?.() ?? 0,
    node: process.execPath,
    readFile: (p) => readFileSync(p),
    bundle: ownBundleFile(),
    out: (text) => process.stdout.write(text),
  };
}

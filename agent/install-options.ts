// `skippy install`'s command line, settled into what it will write: where each file goes, the
// SKIPPY_* settings of the environment file, the node token (or an enrollment token) and the CA. Every setting is checked
// by loading it exactly as the service will (loadAgentConfig on the environment file's
// variables), so install and the agent cannot disagree about what is valid.
import { X509Certificate } from "node:crypto";
import { accessSync, constants, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { AGENT_OPTIONS, loadAgentConfig } from "./config.js";
import { checkPlainPath, environmentFileText } from "./service-unit.js";

export const INSTALL_USAGE = `Usage: skippy install --controller URL --node-id ID (--token-file PATH | --enroll-token-file PATH) [options]

Sets this host up to run skippy as a systemd service: copies the bundle it runs from, writes the
settings, the node token and the unit, and prints the systemctl commands that start it. Run it
as root. Run it again to change a setting: files that would not change are left as they are.

  --controller URL       the controller this host joins (required)
  --node-id ID           this node's id, as registered with the controller (required)
  --token-file PATH      file holding the node token ('-': standard input); copied, mode 0600
  --token TOKEN          the node token itself (other users see it in the process list)
  --enroll-token-file PATH  instead of a node token: an enrollment token ('-': standard input),
                         copied to <config-dir>/enroll-token, mode 0600; the service enrolls at
                         its first start and then authenticates with its own client certificate
  --enroll-token TOKEN   the enrollment token itself
  --ca-file PATH         CA that signed the controller's certificate; copied to <config-dir>/ca.crt
  --label KEY=VALUE      a node label, repeatable
  --poll-interval DUR, --allow-command PROG, --allow-process-source SRC, --compose-timeout DUR,
  --ready-timeout DUR, --log-level LEVEL, --no-watch, --wire FORMAT, --transport MODE,
  --metrics-listen HOST:PORT, --metrics-allow-remote
                         as for skippy (skippy --help); written to the environment file

Where it writes (defaults under --prefix):
  --prefix DIR           root of the default paths below (default /)
  --config-dir DIR       skippy.env, node-token, ca.crt (default /etc/skippy)
  --unit-dir DIR         skippy.service (default /etc/systemd/system)
  --bin-dir DIR          skippy.mjs, the copy of this bundle the service runs (default /usr/local/lib/skippy)
  --state-dir DIR        the agent's order journal (default /var/lib/skippy)
  --work-dir DIR         compose projects (default /opt/skipper)
  --node PATH            the Node binary the service runs (default: the one running this)
  --dry-run              print what would be written (never the token) and write nothing
  -h, --help             this text
`;

/** Agent flags install passes on, each as the SKIPPY_* variable the agent reads it from. */
const SETTINGS = [
  ["poll-interval", "SKIPPY_POLL_INTERVAL"],
  ["compose-timeout", "SKIPPY_COMPOSE_TIMEOUT"],
  ["ready-timeout", "SKIPPY_READY_TIMEOUT"],
  ["log-level", "SKIPPY_LOG_LEVEL"],
  ["wire", "SKIPPY_WIRE"],
  ["transport", "SKIPPY_TRANSPORT"],
  ["metrics-listen", "SKIPPY_METRICS_LISTEN"],
] as const;
/** Repeatable agent flags: comma-separated lists in the environment. */
const LISTS = [
  ["label", "SKIPPY_LABELS"],
  ["allow-command", "SKIPPY_ALLOW_COMMANDS"],
  ["allow-process-source", "SKIPPY_ALLOW_PROCESS_SOURCES"],
] as const;

/** Where install writes, and what the service is started with. */
export interface InstallPaths {
  configDir: string;
  unitDir: string;
  binDir: string;
  stateDir: string;
  workDir: string;
  node: string;
}

/** A checked install: nothing in it is refused by the agent's configuration. */
export interface InstallRequest {
  paths: InstallPaths;
  /** The environment file's variables (no secret among them). */
  env: Record<string, string>;
  /** The node token, or the enrollment token when `enroll`. */
  token: string;
  /** The token is an enrollment token (written to enroll-token, not node-token). */
  enroll: boolean;
  /** The CA's PEM text, when --ca-file was given. */
  ca?: Buffer;
  dryRun: boolean;
}

/** Who runs install and with what: injected so tests need not be root. */
export interface InstallContext {
  uid: number;
  node: string;
  readFile(path: string): Buffer;
}

/** The checked request, or "help"; throws a message for people on any bad input. */
export function parseInstall(argv: string[], ctx: InstallContext): InstallRequest | "help" {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      // The agent's own flags, written to the environment file (state and work dirs: where they go).
      ...AGENT_OPTIONS,
      "enroll-token": { type: "string" },
      "enroll-token-file": { type: "string" },
      prefix: { type: "string" },
      "config-dir": { type: "string" },
      "unit-dir": { type: "string" },
      "bin-dir": { type: "string" },
      node: { type: "string" },
      "dry-run": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) return "help";
  if (!values.controller) throw new Error("--controller URL is required: the controller this host joins");
  const given = (["token", "token-file", "enroll-token", "enroll-token-file"] as const).filter((f) => values[f] !== undefined);
  if (given.length !== 1)
    throw new Error(
      "give one credential: the node token with --token-file or --token, or an enrollment token with --enroll-token-file or --enroll-token",
    );
  const enroll = given[0]!.startsWith("enroll");
  const dryRun = values["dry-run"] ?? false;
  const paths = installPaths(values, ctx);
  const system = (["config-dir", "unit-dir", "bin-dir"] as const).filter((f) => values.prefix === undefined && values[f] === undefined);
  if (!dryRun && ctx.uid !== 0 && system.length > 0)
    throw new Error(
      `writing the system paths of ${system.map((f) => `--${f}`).join(", ")} needs root: run it as root, or give --prefix DIR (or those flags) to install elsewhere`,
    );

  const token = enroll
    ? readToken(values["enroll-token"], values["enroll-token-file"], ctx, "enrollment token")
    : readToken(values.token, values["token-file"], ctx, "node token");
  const ca = values["ca-file"] === undefined ? undefined : readCa(values["ca-file"], ctx);
  const tokenFile = join(paths.configDir, enroll ? "enroll-token" : "node-token");
  const env: Record<string, string> = {
    SKIPPY_CONTROLLER_URL: values.controller,
    SKIPPY_NODE_ID: values["node-id"] ?? "",
    [enroll ? "SKIPPY_ENROLL_TOKEN_FILE" : "SKIPPY_NODE_TOKEN_FILE"]: tokenFile,
    ...(ca ? { SKIPPY_CA_FILE: join(paths.configDir, "ca.crt") } : {}),
    SKIPPY_STATE_DIR: paths.stateDir,
    SKIPPY_WORK_DIR: paths.workDir,
  };
  for (const [flag, name] of SETTINGS) if (values[flag] !== undefined) env[name] = values[flag];
  for (const [flag, name] of LISTS) {
    const entries = values[flag] ?? [];
    const comma = entries.find((e) => e.includes(","));
    if (comma !== undefined) throw new Error(`--${flag} cannot hold ',' (${name} is a comma-separated list), got '${comma}'`);
    if (entries.length > 0) env[name] = entries.join(",");
  }
  if (values["no-watch"]) env.SKIPPY_WATCH = "0";
  if (values["metrics-allow-remote"]) env.SKIPPY_METRICS_ALLOW_REMOTE = "1";
  // The service's view of these settings. The one file they name that it reads is the token's.
  loadAgentConfig([], env, () => token);
  environmentFileText(env); // refuses values the file cannot hold
  return { paths, env, token, enroll, ca, dryRun };
}

function installPaths(values: Record<string, unknown>, ctx: InstallContext): InstallPaths {
  const prefix = resolve((values.prefix as string | undefined) ?? "/");
  const at = (flag: string, fallback: string) => resolve((values[flag] as string | undefined) ?? join(prefix, fallback));
  const paths = {
    configDir: at("config-dir", "etc/skippy"),
    unitDir: at("unit-dir", "etc/systemd/system"),
    binDir: at("bin-dir", "usr/local/lib/skippy"),
    stateDir: at("state-dir", "var/lib/skippy"),
    workDir: at("work-dir", "opt/skipper"),
    node: resolve((values.node as string | undefined) ?? ctx.node),
  };
  for (const [flag, path] of Object.entries(paths)) checkPlainPath(`--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`, path);
  if (values.node !== undefined) {
    try {
      accessSync(paths.node, constants.X_OK);
    } catch {
      throw new Error(`--node ${paths.node} is not an executable file`);
    }
  }
  return paths;
}

function readToken(inline: string | undefined, file: string | undefined, ctx: InstallContext, what: string): string {
  let token = inline;
  if (file !== undefined) {
    try {
      token = (file === "-" ? readFileSync(0) : ctx.readFile(file)).toString("utf8");
    } catch (e) {
      const flag = what === "node token" ? "--token-file" : "--enroll-token-file";
      throw new Error(`cannot read the ${what} from ${flag} ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  }
  token = (token ?? "").trim();
  if (!/^[\x21-\x7e]+$/.test(token))
    throw new Error(
      `the ${what} must be one word of printable ASCII${file === undefined ? "" : ` (read from ${file === "-" ? "standard input" : file})`}`,
    );
  return token;
}

function readCa(file: string, ctx: InstallContext): Buffer {
  let pem: Buffer;
  try {
    pem = ctx.readFile(file);
  } catch (e) {
    throw new Error(`cannot read --ca-file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  // The agent hands the file to TLS as PEM text: a DER certificate would parse here and fail there.
  try {
    if (!pem.toString("latin1").includes("-----BEGIN CERTIFICATE-----")) throw new Error("not PEM");
    new X509Certificate(pem);
  } catch {
    throw new Error(`--ca-file ${file} is not a PEM certificate`);
  }
  return pem;
}

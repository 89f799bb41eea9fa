// `skippy join URL --fingerprint SHA256:…` with the enrollment token in SKIPPER_JOIN_TOKEN (or
// read by --token-file PATH, `-` for stdin; never an argument: process lists show those): one
// command that makes this host a node.
//
//   1. trust: the controller's certificate is trusted by its key's fingerprint alone (pinned-fetch.ts);
//      over that, AgentBundleService.GetAgentBundle (REST GET /v1/agent-bundle): the bundle's
//      signed manifest, the signing key and the CA the agent will trust;
//   2. the bundle: this one when it is the one the controller signed, else the controller's
//      (GET /v1/agent-bundle/skippy.mjs, same pin); its size, SHA-256 and Ed25519 signature must
//      match the manifest (common/agent-bundle-signature.ts), or nothing happens;
//   3. the install's settings checked as `skippy install` checks them (install-options.ts);
//   4. enrollment: the existing CSR flow (certificate-keeper.ts) over TLS checked against the CA;
//   5. the install (install.ts): bundle copy, settings, token, CA, skippy.service;
//   6. the start: systemctl when this host runs systemd; otherwise (or with --root, a scratch
//      root that stands for /) what to run.
// Any failure before step 5 leaves the host as it was (a refused enrollment's key is removed).
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { isIP } from "node:net";
import tls from "node:tls";
import { bundleMismatch, pinDigest, type BundleManifest } from "../common/agent-bundle-signature.js";
import { isValidId } from "../common/ids.js";
import { createLogger } from "../common/logging/logger.js";
import { chooseCredential } from "./certificate-keeper.js";
import { createControllerClients } from "./controller-client.js";
import { enrollmentDone } from "./identity.js";
import { installFiles, ownBundleFile } from "./install.js";
import { parseInstall, type InstallRequest } from "./install-options.js";
import { pinnedGet } from "./pinned-fetch.js";
import { UNIT_NAME } from "./service-unit.js";

export const JOIN_USAGE = `Usage: SKIPPER_JOIN_TOKEN=TOKEN skippy join URL --fingerprint SHA256:<base64> [options]

Makes this host a node of the controller at URL, in one step: trusts the controller by the
fingerprint of its certificate's key, takes the agent bundle the controller signed (refused unless
its SHA-256 and Ed25519 signature match), enrolls with the enrollment TOKEN (a key pair made here,
a certificate signed by the controller), installs skippy as a systemd service (as skippy install
does) and starts it. Run it as root. \`skipper node join-command\` prints the whole line; the
controller's /v1/join.sh runs it from curl.

  --fingerprint PIN   the controller certificate's key: SHA256:<base64> (or curl's sha256//<base64>)
  --token-file PATH   read the enrollment token from PATH (- for stdin) instead of SKIPPER_JOIN_TOKEN
  --node-id ID        this node's id (default: the host name, ${JSON.stringify(hostname())})
  --root DIR          install under DIR instead of / (a scratch root) and start nothing
  --no-start          install, but leave the start to you
  --label KEY=VALUE, --poll-interval DUR, ... any other flag of skippy install, passed on
URL comes first; the flags follow it. The token is never an argument (process lists show those).
  -h, --help          this text
`;

/** Flags join sets itself, refused among those passed on to install. */
const OWN_INSTALL_FLAGS = ["controller", "node-id", "token", "enroll-token", "enroll-token-file", "ca-file", "prefix", "dry-run"];

interface JoinRequest {
  url: string;
  token: string;
  pin: string;
  nodeId: string;
  root?: string;
  start: boolean;
  installArgs: string[];
}

/** What join needs from the process: injected by tests. */
export interface JoinDeps {
  uid: number;
  /** Where SKIPPER_JOIN_TOKEN is read (default: the process's environment, from which it is then removed). */
  env?: Record<string, string | undefined>;
  /** Reads a --token-file (`-`: stdin). */
  readToken?: (path: string) => string;
  out(text: string): void;
  err(text: string): void;
}

/** Runs `skippy join` with `argv` (after "join"); returns the exit code. */
export async function joinCommand(argv: string[], deps: JoinDeps = processDeps()): Promise<number> {
  let req: JoinRequest | "help";
  try {
    req = parseJoin(argv, deps);
  } catch (e) {
    deps.err(`skippy join: ${(e as Error).message}\n(skippy join --help lists the options)\n`);
    return 2;
  }
  if (req === "help") {
    deps.out(JOIN_USAGE);
    return 0;
  }
  const scratch = mkdtempSync(join(tmpdir(), "skippy-join-"));
  const progress = { installing: false };
  try {
    return await joinSteps(req, scratch, deps, progress);
  } catch (e) {
    const after = progress.installing ? "" : "Nothing was installed.\n";
    deps.err(`skippy join: ${(e as Error).message}\n${after}`);
    return 1;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The steps listed at the top; `progress.installing` from the first write of the install on. */
async function joinSteps(req: JoinRequest, scratch: string, deps: JoinDeps, progress: { installing: boolean }): Promise<number> {
  const about = await controllerFacts(req);
  const m = about.manifest;
  deps.out(`Controller ${req.url} (certificate key ${req.pin}) serves skippy ${m.version}, signed by ${about.keyFingerprint}.\n`);
  const bundle = await verifiedBundle(req, about);
  deps.out(`Bundle checked: ${m.size} bytes, sha256 ${m.sha256}, signature valid.\n`);
  const caFile = join(scratch, "ca.crt");
  if (about.caPem) writeFileSync(caFile, about.caPem);
  const install = checkedInstall(req, about.caPem ? caFile : undefined, deps.uid);
  await checkTrust(req.url, about.caPem);
  await enroll(req, install, about.caPem ? caFile : undefined);
  deps.out(`Enrolled as node ${req.nodeId}: its key and certificate are in ${join(install.paths.stateDir, "identity")}.\n`);
  progress.installing = true;
  const outcome = await installFiles(install, bundle, deps.out);
  deps.out(start(req, install, outcome));
  return 0;
}

/** The checked command line, or "help"; throws a message for people on bad input. */
function parseJoin(argv: string[], deps: JoinDeps): JoinRequest | "help" {
  if (argv.includes("--help") || argv.includes("-h")) return "help";
  const [url, ...flags] = argv;
  if (!url || url.startsWith("-")) throw new Error("the controller's URL comes first: skippy join URL --fingerprint PIN [options]");
  if (flags[0] !== undefined && !flags[0].startsWith("-"))
    throw new Error("the token is not taken as an argument (process lists show those): set SKIPPER_JOIN_TOKEN or give --token-file -");
  if (!/^https:\/\/[^/\s]+\/?$/.test(url)) throw new Error(`the controller's URL is https://HOST[:PORT], got '${url}'`);
  // join's own flags are taken out; every other one (with its value) goes to install, in order.
  const own: Record<string, string | true> = {};
  const installArgs: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i]!;
    const [name, inline] = flag.startsWith("--")
      ? [flag.slice(2).split("=")[0]!, flag.includes("=") ? flag.slice(flag.indexOf("=") + 1) : undefined]
      : ["", undefined];
    if (name === "no-start") own[name] = true;
    else if (["fingerprint", "node-id", "root", "token-file"].includes(name)) {
      const value = inline ?? flags[++i];
      if (value === undefined) throw new Error(`--${name} needs a value`);
      own[name] = value;
    } else if (OWN_INSTALL_FLAGS.includes(name))
      throw new Error(`--${name} is join's to set: it comes from URL, the token, --node-id and --root`);
    else installArgs.push(flag);
  }
  if (typeof own.fingerprint !== "string")
    throw new Error("--fingerprint is required: the key of the controller's certificate (skipper node join-command prints it)");
  const pin = `SHA256:${pinDigest(own.fingerprint)}`;
  const nodeId = typeof own["node-id"] === "string" ? own["node-id"] : hostname();
  if (!isValidId(nodeId)) throw new Error(`the node id '${nodeId}' is not an id (1-128 of A-Z a-z 0-9 . _ -): give --node-id`);
  const root = typeof own.root === "string" ? own.root : undefined;
  const token = joinToken(typeof own["token-file"] === "string" ? own["token-file"] : undefined, deps);
  return { url: url.replace(/\/$/, ""), token, pin, nodeId, root, start: own["no-start"] !== true && !root, installArgs };
}

// The enrollment token: from --token-file (`-`: stdin) or SKIPPER_JOIN_TOKEN, which is then
// dropped from this process's environment (the commands join starts do not inherit it).
function joinToken(file: string | undefined, deps: JoinDeps): string {
  const env = deps.env ?? process.env;
  const fromEnv = env.SKIPPER_JOIN_TOKEN;
  if (!deps.env) delete process.env.SKIPPER_JOIN_TOKEN;
  const read = deps.readToken ?? ((path: string) => readFileSync(path === "-" ? 0 : path, "utf8"));
  const token = (file !== undefined ? read(file) : (fromEnv ?? "")).trim();
  if (token === "") {
    throw new Error(
      file !== undefined
        ? `--token-file ${file} holds no token`
        : "the enrollment token is missing: set SKIPPER_JOIN_TOKEN or give --token-file -",
    );
  }
  return token;
}

interface ControllerFacts {
  manifest: BundleManifest;
  signingKey: string;
  keyFingerprint: string;
  caPem: string;
}

/** GetAgentBundle's answer (REST), under the pin. */
async function controllerFacts(req: JoinRequest): Promise<ControllerFacts> {
  const body = await pinnedGet(`${req.url}/v1/agent-bundle`, req.pin, 1 << 20);
  const data = (JSON.parse(body.toString("utf8")) as { data?: Record<string, unknown> }).data ?? {};
  const m = data.manifest as Record<string, unknown> | undefined;
  if (!m) throw new Error(`the controller at ${req.url} serves no agent bundle (it is started without one: --agent-bundle)`);
  return {
    manifest: { version: String(m.version), sha256: String(m.sha256), size: Number(m.size), signature: String(m.signature) },
    signingKey: String(data.signing_public_key ?? ""),
    keyFingerprint: String(data.signing_key_fingerprint ?? ""),
    caPem: String(data.ca_pem ?? ""),
  };
}

/** This bundle when the controller signed it, else the controller's; refused unless it matches the manifest. */
async function verifiedBundle(req: JoinRequest, about: ControllerFacts): Promise<Buffer> {
  const own = ownBundleFile();
  if (own) {
    const mine = readFileSync(own);
    if (!bundleMismatch(mine, about.manifest, about.signingKey)) return mine;
  }
  const served = await pinnedGet(`${req.url}/v1/agent-bundle/skippy.mjs`, req.pin, 256 << 20);
  const why = bundleMismatch(served, about.manifest, about.signingKey);
  if (why) throw new Error(`the agent bundle from ${req.url} is refused: ${why}`);
  return served;
}

/** What install will write, checked in full before anything is. */
function checkedInstall(req: JoinRequest, caFile: string | undefined, uid: number): InstallRequest {
  const argv = [
    "--controller",
    req.url,
    "--node-id",
    req.nodeId,
    "--enroll-token",
    req.token,
    ...(caFile ? ["--ca-file", caFile] : []),
    ...(req.root ? ["--prefix", req.root] : []),
    ...req.installArgs,
  ];
  const parsed = parseInstall(argv, { uid, node: process.execPath, readFile: (p) => readFileSync(p) });
  if (parsed === "help") throw new Error("--help goes before the URL");
  return parsed;
}

/** The controller's certificate verifies against the CA under the URL's name, as the service will check it. */
function checkTrust(url: string, caPem: string): Promise<void> {
  const { hostname: host, port } = new URL(url);
  const name = host.replace(/^\[|\]$/g, "");
  return new Promise((resolve, reject) => {
    const socket = tls.connect(
      {
        host: name,
        port: Number(port || 443),
        ...(caPem ? { ca: caPem } : {}),
        servername: isIP(name) ? undefined : name,
        rejectUnauthorized: false,
      },
      () => {
        const why = socket.authorized ? undefined : (socket.authorizationError?.message ?? String(socket.authorizationError));
        const peer = socket.getPeerX509Certificate();
        const named = peer?.checkHost(name) ?? peer?.checkIP(name);
        socket.destroy();
        if (why) reject(new Error(`the controller's certificate does not verify against its CA: ${why}`));
        else if (!named)
          reject(
            new Error(
              `the controller's certificate does not name ${name}: join it by a name it holds, or give the controller --tls-hostname ${name}`,
            ),
          );
        else resolve();
      },
    );
    socket.on("error", reject);
  });
}

/** Enrolls with the token (the key made here), or keeps the node's saved certificate. */
async function enroll(req: JoinRequest, install: InstallRequest, caFile: string | undefined): Promise<void> {
  const { logger, close } = createLogger({ service: "skippy", stdout: false });
  const stateDir = install.paths.stateDir;
  const clients = () => createControllerClients({ baseUrl: `${req.url}/v1`, credential: { none: true }, caFile });
  try {
    await chooseCredential(
      { nodeId: req.nodeId, stateDir, token: "", enrollToken: req.token },
      clients,
      logger,
      AbortSignal.timeout(60_000),
    );
  } catch (e) {
    await enrollmentDone(stateDir);
    throw e;
  } finally {
    close();
  }
}

/** Starts the service where this host runs systemd; says what to run otherwise. */
function start(req: JoinRequest, install: InstallRequest, outcome: string): string {
  const envFile = install.env.SKIPPY_ENROLL_TOKEN_FILE!.replace(/enroll-token$/, "skippy.env");
  const byHand = `set -a; . ${envFile}; set +a; ${install.paths.node} ${join(install.paths.binDir, "skippy.mjs")}`;
  if (req.root) return `\nInstalled under ${req.root}; nothing was started. To run this agent by hand:\n  ${byHand}\n`;
  const systemd = existsSync("/run/systemd/system");
  if (!req.start || !systemd) {
    const how = systemd ? "" : "This host does not run systemd. ";
    return `\n${how}To start it, as root:\n  systemctl daemon-reload && systemctl enable --now skippy\nor by hand:\n  ${byHand}\n`;
  }
  execFileSync("systemctl", ["daemon-reload"], { stdio: "inherit" });
  execFileSync("systemctl", ["enable", "--now", UNIT_NAME], { stdio: "inherit" });
  if (outcome === "updated") execFileSync("systemctl", ["restart", UNIT_NAME], { stdio: "inherit" });
  return "\nStarted: systemctl enable --now skippy. Its log: journalctl -u skippy -f\n";
}

function processDeps(): JoinDeps {
  return {
    uid: process.getuid?.() ?? 0,
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
  };
}

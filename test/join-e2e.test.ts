// One-command join, end to end: the built controller serving an agent bundle built for this test,
// the one-liner the built `skipper node join-command` prints run for real through sh and curl (HTTPS, the
// pin), into a scratch root (--root) so nothing of this machine is touched; the agent it
// installed, started as systemd starts it, heartbeats over mutual TLS and its node shows online.
// A bundle changed by one byte on the way (a server holding the controller's certificate and key,
// so the pin holds) is refused by the script and by skippy join; a wrong fingerprint is refused by
// curl and by skippy join; in each case nothing is installed and the token is not used.
import { spawn, type ChildProcess } from "node:child_process";
import { createPublicKey, randomBytes, createHash } from "node:crypto";
import { createWriteStream, existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { joinLine } from "../common/join-line.js";
import { AgentBundleService } from "../gen/skipper/v1/agent_bundle_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { buildAgentBundle, SERVICE_PATH } from "./helpers/bundle.js";
import { E2E_ADMIN_TOKEN, startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const NODE = "joined-host";
const AGENT_MAIN = fileURLToPath(new URL("../dist/agent/main.js", import.meta.url));
const CLI_MAIN = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));

/** The KEY="value" lines of an environment file. */
function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const m = /^([A-Z_][A-Z0-9_]*)="([^"]*)"$/.exec(line);
    if (m) env[m[1]!] = m[2]!;
  }
  return env;
}

/** A shell line run as on a host: sh, the service PATH (curl, node), nothing of the test's environment. */
function sh(line: string) {
  return execa("sh", ["-c", line], { env: { PATH: SERVICE_PATH }, extendEnv: false, reject: false });
}

describe("one-command join (built controller, curl and sh, a scratch root)", () => {
  let root: string;
  let bundle: string;
  let ctl: ControllerProcess;
  let pin: string;
  let tamperer: https.Server | undefined;
  let agent: ChildProcess | undefined;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-join-"));
    bundle = await buildAgentBundle(join(root, "build"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--agent-bundle", bundle] });
    pin = (await ctl.admin(AgentBundleService).getAgentBundle({})).tlsPin;
  }, 120_000);

  afterAll(async () => {
    if (agent) await stopProcess(agent);
    tamperer?.close();
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  async function enrollmentToken(nodeId: string): Promise<{ token: string; id: string }> {
    const res = await ctl.admin(EnrollmentService).createEnrollmentToken({ nodeId, labels: { env: "test" } });
    return { token: res.token, id: res.enrollmentToken!.id };
  }

  async function remainingUses(id: string): Promise<number | undefined> {
    const { enrollmentTokens } = await ctl.admin(EnrollmentService).listEnrollmentTokens({ includeInactive: true });
    return enrollmentTokens.find((t) => t.id === id)?.remainingUses;
  }

  it("the controller states what it serves: the bundle's manifest, signed, and the certificate pin", async () => {
    const res = await ctl.admin(AgentBundleService).getAgentBundle({});
    const bytes = await readFile(bundle);
    expect(res.manifest).toMatchObject({
      version: "0.1.0",
      size: BigInt(bytes.length),
      sha256: createHash("sha256").update(bytes).digest("hex"),
    });
    expect(res.tlsPin).toMatch(/^SHA256:[A-Za-z0-9+/]{43}=$/);
    expect(res.caPem).toBe(ctl.ca);
    // The key is kept in the data directory, 0600, and is the one shown.
    const keyFile = join(ctl.dataDir, "tls", "agent-signing.key");
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    const raw = createPublicKey(await readFile(keyFile, "utf8")).export({ format: "jwk" }).x!;
    expect(Buffer.from(raw, "base64url").toString("base64")).toBe(res.signingPublicKey);
    // The download is a plain GET, the bytes the manifest describes.
    const got = await execa("curl", ["-fsS", "--pinnedpubkey", `sha256//${pin.slice(7)}`, "-k", `${ctl.url}/v1/agent-bundle/skippy.mjs`], {
      encoding: "buffer",
      stripFinalNewline: false,
    });
    expect(Buffer.from(got.stdout).equals(bytes)).toBe(true);
  });

  it("the one-liner joins the host into a scratch root, and the agent it installed heartbeats over mTLS", async () => {
    // The line as the CLI prints it (a new single-use token bound to the node, with its labels).
    const printed = await execa(process.execPath, [CLI_MAIN, "node", "join-command", NODE, "--label", "env=test"], {
      env: {
        SKIPPER_SERVER: ctl.url,
        SKIPPER_CA_FILE: ctl.caFile,
        SKIPPER_TOKEN: E2E_ADMIN_TOKEN,
        XDG_CONFIG_HOME: join(root, "cli-config"),
      },
    });
    const line = printed.stdout.trim();
    expect(line).toMatch(
      new RegExp(
        `^curl -fsS --pinnedpubkey sha256//\\S+ -k ${ctl.url}/v1/join\\.sh \\| SKIPPER_JOIN_TOKEN=ske_\\S+ sh -s -- --node-id ${NODE}$`,
      ),
    );
    const token = /ske_\S+/.exec(line)![0];
    const id = token.split("_")[1]!;
    const scratch = join(root, "host");
    const run = await sh(`${line} --root ${scratch} --poll-interval 200ms`);
    expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain("Bundle checked:");
    expect(run.stdout).toContain(`Enrolled as node ${NODE}`);
    expect(run.stdout).toContain("nothing was started");
    expect(`${run.stdout}${run.stderr}`).not.toContain(token.split("_")[2]);
    expect(await remainingUses(id)).toBe(0);

    const installed = join(scratch, "usr/local/lib/skippy/skippy.mjs");
    expect((await readFile(installed)).equals(await readFile(bundle))).toBe(true);
    expect((await stat(join(scratch, "var/lib/skippy/identity/node.pem"))).mode & 0o777).toBe(0o600);
    expect(await readFile(join(scratch, "etc/skippy/ca.crt"), "utf8")).toBe(ctl.ca);
    const env = parseEnvFile(await readFile(join(scratch, "etc/skippy/skippy.env"), "utf8"));
    expect(env).toMatchObject({ SKIPPY_CONTROLLER_URL: ctl.url, SKIPPY_NODE_ID: NODE, SKIPPY_POLL_INTERVAL: "200ms" });
    // No bearer token anywhere: the agent can only call with the certificate it enrolled for.
    expect(env.SKIPPY_NODE_TOKEN_FILE).toBeUndefined();
    expect(existsSync(join(scratch, "etc/systemd/system/skippy.service"))).toBe(true);

    // Started as the unit starts it: node, the installed bundle, the environment file.
    const log = createWriteStream(join(root, "joined-agent.log"));
    agent = spawn(process.execPath, [installed], { cwd: "/", env: { PATH: SERVICE_PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    agent.stdout!.pipe(log);
    agent.stderr!.pipe(log);
    const node = await waitFor("the joined agent online", async () => {
      if (agent!.exitCode !== null)
        throw new Error(`skippy exited with ${agent!.exitCode}: ${await readFile(join(root, "joined-agent.log"), "utf8")}`);
      const r = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
      const n = r.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
      return n?.agentVersion && n.liveness === NodeLiveness.ONLINE ? n : undefined;
    });
    expect(node.agentVersion).toBe("0.1.0");
    // The token's labels, given to the node it created.
    const spec = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!.desiredState;
    expect(spec?.kind.case === "node" ? spec.kind.value.labels : undefined).toEqual({ env: "test" });
    await stopProcess(agent);
    expect(agent.exitCode).toBe(0);
  }, 120_000);

  it("a bundle changed by one byte on the way is refused, by the script and by skippy join; nothing is installed", async () => {
    // A server holding the controller's own certificate and key (so the pin holds) that passes
    // everything on but flips one byte of the bundle.
    const [cert, key] = await Promise.all(["server.crt", "server.key"].map((f) => readFile(join(ctl.dataDir, "tls", f), "utf8")));
    const upstream = new URL(ctl.url);
    tamperer = https.createServer({ cert, key }, (req, res) => {
      const up = https.request(
        {
          host: upstream.hostname,
          port: upstream.port,
          path: req.url,
          method: req.method,
          headers: { host: req.headers.host },
          ca: ctl.ca,
        },
        (answer) => {
          const chunks: Buffer[] = [];
          answer.on("data", (c: Buffer) => chunks.push(c));
          answer.on("end", () => {
            const body = Buffer.concat(chunks);
            if (req.url === "/v1/agent-bundle/skippy.mjs") body[body.length >> 1] = body[body.length >> 1]! ^ 1;
            res.writeHead(answer.statusCode!, { "content-type": answer.headers["content-type"] ?? "", "content-length": body.length });
            res.end(body);
          });
        },
      );
      up.on("error", () => res.destroy());
      up.end();
    });
    await new Promise<void>((r) => tamperer!.listen(0, "127.0.0.1", r));
    const via = `https://127.0.0.1:${(tamperer.address() as AddressInfo).port}`;
    const { token, id } = await enrollmentToken("tampered-host");

    const scratch = join(root, "tampered-by-script");
    const run = await sh(`${joinLine({ url: via, pin, token, nodeId: "tampered-host" })} --root ${scratch}`);
    expect(run.exitCode).not.toBe(0);
    expect(run.stderr).toMatch(
      /join\.sh: the downloaded agent bundle is refused: its SHA-256 is [0-9a-f]{64}, the controller signed [0-9a-f]{64}\. Nothing was installed\./,
    );
    expect(existsSync(scratch)).toBe(false);

    // skippy join run from something that is not the signed bundle downloads it, and refuses it.
    const direct = join(root, "tampered-by-join");
    const joined = await execa(
      process.execPath,
      [AGENT_MAIN, "join", via, "--token-file", "-", "--fingerprint", pin, "--node-id", "tampered-host", "--root", direct],
      { reject: false, input: `${token}\n` },
    );
    expect(joined.exitCode).toBe(1);
    expect(joined.stderr).toMatch(
      /the agent bundle from https:\/\/127\.0\.0\.1:\d+ is refused: its SHA-256 is [0-9a-f]{64}, the manifest says/,
    );
    expect(joined.stderr).toContain("Nothing was installed.");
    expect(existsSync(direct)).toBe(false);
    expect(await remainingUses(id)).toBe(1);
  }, 60_000);

  it("a wrong fingerprint is refused, by curl and by skippy join; nothing is installed", async () => {
    const wrong = `SHA256:${randomBytes(32).toString("base64")}`;
    const { token, id } = await enrollmentToken("wrong-pin-host");
    const scratch = join(root, "wrong-pin-by-curl");
    const run = await sh(`${joinLine({ url: ctl.url, pin: wrong, token, nodeId: "wrong-pin-host" })} --root ${scratch}`);
    // curl refuses the connection before any script is read; sh then reads nothing and ends 0,
    // as `curl … | sh` does anywhere (POSIX sh has no pipefail): nothing ran.
    expect(run.stderr).toMatch(/public key does not match pinned public key/);
    expect(run.stdout).toBe("");
    expect(existsSync(scratch)).toBe(false);

    const direct = join(root, "wrong-pin-by-join");
    const joined = await execa(
      process.execPath,
      [bundle, "join", ctl.url, "--fingerprint", wrong, "--node-id", "wrong-pin-host", "--root", direct],
      { reject: false, env: { SKIPPER_JOIN_TOKEN: token } },
    );
    expect(joined.exitCode).toBe(1);
    expect(joined.stderr).toContain(`presented a certificate whose key is ${pin}, not the fingerprint given (${wrong})`);
    expect(joined.stderr).toContain("Nothing was installed.");
    expect(existsSync(direct)).toBe(false);
    expect(await remainingUses(id)).toBe(1);
  }, 60_000);
});

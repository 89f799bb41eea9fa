// `skippy join`'s command line, refused before anything is fetched or written, and the one-liner
// `skipper node join-command` and the dashboard print.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { joinCommand } from "../agent/join.js";
import { joinLine } from "../common/join-line.js";
import { joinScript } from "../controller/nodes/join-script.js";

const PIN = `SHA256:${Buffer.alloc(32, 7).toString("base64")}`;

async function run(
  argv: string[],
  env: Record<string, string> = { SKIPPER_JOIN_TOKEN: "ske_a_b" },
  files: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const readToken = (path: string) => {
    if (!(path in files)) throw new Error(`ENOENT: ${path}`);
    return files[path]!;
  };
  const code = await joinCommand(argv, { uid: 0, out: (t) => (out += t), err: (t) => (err += t), env, readToken });
  return { code, out, err };
}

describe("skippy join's command line", () => {
  it("prints its usage with --help", async () => {
    const r = await run(["--help"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("Usage: SKIPPER_JOIN_TOKEN=TOKEN skippy join URL --fingerprint SHA256:<base64>");
  });

  it.each([
    [[], /the controller's URL comes first/],
    [["--fingerprint", PIN, "https://c:8443"], /the controller's URL comes first/],
    [["https://c:8443", "ske_a_b", "--fingerprint", PIN], /the token is not taken as an argument/],
    [["http://c:8443", "--fingerprint", PIN], /https:\/\/HOST\[:PORT\]/],
    [["https://c:8443"], /--fingerprint is required/],
    [["https://c:8443", "--fingerprint", "abc"], /a fingerprint is SHA256:<base64 of 32 bytes>/],
    [["https://c:8443", "--fingerprint", PIN, "--controller", "https://x"], /--controller is join's to set/],
    [["https://c:8443", "--fingerprint", PIN, "--ca-file=/x"], /--ca-file is join's to set/],
    [["https://c:8443", "--fingerprint", PIN, "--enroll-token", "ske_a_b"], /--enroll-token is join's to set/],
    [["https://c:8443", "--fingerprint", PIN, "--node-id", "a/b"], /the node id 'a\/b' is not an id/],
    [["https://c:8443", "--fingerprint"], /--fingerprint needs a value/],
  ])("refuses %j before doing anything", async (argv, message) => {
    const r = await run(argv as string[]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(message);
    expect(r.out).toBe("");
  });

  it("takes curl's sha256// form of the fingerprint too (refused later only for want of a controller)", async () => {
    const r = await run(["https://127.0.0.1:1", "--fingerprint", `sha256//${PIN.slice(7)}`, "--root", "/nonexistent-join-root"]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/ECONNREFUSED/);
    expect(r.err).toContain("Nothing was installed.");
  });

  it("takes the token from SKIPPER_JOIN_TOKEN or --token-file (- for stdin), and refuses to go on without one", async () => {
    const argv = ["https://127.0.0.1:1", "--fingerprint", PIN, "--root", "/nonexistent-join-root"];
    const none = await run(argv, {});
    expect([none.code, none.err]).toEqual([
      2,
      expect.stringMatching(/the enrollment token is missing: set SKIPPER_JOIN_TOKEN or give --token-file -/),
    ]);
    const empty = await run([...argv, "--token-file", "-"], {}, { "-": "  \n" });
    expect([empty.code, empty.err]).toEqual([2, expect.stringMatching(/--token-file - holds no token/)]);
    // With a token from either place, join goes on (and fails only for want of a controller).
    for (const [env, files, extra] of [
      [{}, { "-": "ske_a_b\n" }, ["--token-file", "-"]],
      [{}, { "/run/t": "ske_a_b" }, ["--token-file=/run/t"]],
      [{ SKIPPER_JOIN_TOKEN: "ske_a_b" }, {}, []],
    ] as const) {
      const r = await run([...argv, ...extra], env, files);
      expect([r.code, r.err]).toEqual([1, expect.stringMatching(/ECONNREFUSED/)]);
    }
  });
});

describe("the join line", () => {
  it("is curl under the pin piped to sh, the token in sh's environment (never an argument), the node when bound", () => {
    expect(joinLine({ url: "https://ctl.example:8443/", pin: PIN, token: "ske_a_b", nodeId: "host-4" })).toBe(
      `curl -fsS --pinnedpubkey sha256//${PIN.slice(7)} -k https://ctl.example:8443/v1/join.sh | SKIPPER_JOIN_TOKEN=ske_a_b sh -s -- --node-id host-4`,
    );
    expect(joinLine({ url: "https://ctl.example:8443/v1", pin: PIN, token: "ske_a_b" })).toBe(
      `curl -fsS --pinnedpubkey sha256//${PIN.slice(7)} -k https://ctl.example:8443/v1/join.sh | SKIPPER_JOIN_TOKEN=ske_a_b sh -s --`,
    );
  });
});

describe("the join script hands the token on in the environment, never as an argument", () => {
  // The script as a host runs it, with curl and node stood in for: node writes down its arguments
  // and the token it finds in its environment.
  const dir = mkdtempSync(join(tmpdir(), "skipper-join-sh-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const log = join(dir, "node.log");
  writeFileSync(join(dir, "curl"), "#!/bin/sh\nexit 0\n");
  writeFileSync(join(dir, "node"), `#!/bin/sh\necho "args: $*" >> '${log}'\necho "env: \${SKIPPER_JOIN_TOKEN:-}" >> '${log}'\n`);
  for (const f of ["curl", "node"]) chmodSync(join(dir, f), 0o755);
  const manifest = { version: "1.2.3", sha256: "a".repeat(64), size: 10, signature: "c2ln" };
  const script = joinScript({ url: "https://127.0.0.1:1", pin: PIN, manifest, signingPublicKey: "a2V5" });
  const runScript = (args: string[], env: Record<string, string>) => {
    rmSync(log, { force: true });
    const r = spawnSync("sh", ["-s", "--", ...args], { input: script, encoding: "utf8", env: { PATH: `${dir}:/usr/bin:/bin`, ...env } });
    let calls: string[] = [];
    try {
      calls = readFileSync(log, "utf8").trim().split("\n");
    } catch {}
    return { status: r.status, stderr: r.stderr, join: calls.slice(-2) };
  };

  it("from SKIPPER_JOIN_TOKEN: skippy join gets it in its environment, its arguments hold no token", () => {
    const r = runScript(["--node-id", "h4"], { SKIPPER_JOIN_TOKEN: "ske_id_secret" });
    expect(r.status, r.stderr).toBe(0);
    expect(r.join[1]).toBe("env: ske_id_secret");
    expect(r.join[0]).toMatch(/^args: \S+\/skippy\.mjs join https:\/\/127\.0\.0\.1:1 --fingerprint SHA256:\S+ --node-id h4$/);
    expect(r.join[0]).not.toContain("ske_");
  });

  it("a token as the first argument (the line as printed before) still joins, with a warning; none is refused", () => {
    const legacy = runScript(["ske_id_secret", "--node-id", "h4"], {});
    expect(legacy.status, legacy.stderr).toBe(0);
    expect(legacy.stderr).toContain("shows in process lists");
    expect(legacy.join[1]).toBe("env: ske_id_secret");
    expect(legacy.join[0]).not.toContain("ske_");
    const none = runScript(["--node-id", "h4"], {});
    expect(none.status).toBe(2);
    expect(none.stderr).toContain("SKIPPER_JOIN_TOKEN=TOKEN sh -s --");
    expect(none.join).toEqual([]);
  });
});

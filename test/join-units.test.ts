// `skippy join`'s command line, refused before anything is fetched or written, and the one-liner
// `skipper node join-command` and the dashboard print.
import { describe, expect, it } from "vitest";
import { joinCommand } from "../agent/join.js";
import { joinLine } from "../common/join-line.js";

const PIN = `SHA256:${Buffer.alloc(32, 7).toString("base64")}`;

async function run(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await joinCommand(argv, { uid: 0, out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

describe("skippy join's command line", () => {
  it("prints its usage with --help", async () => {
    const r = await run(["--help"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("Usage: skippy join URL TOKEN --fingerprint SHA256:<base64>");
  });

  it.each([
    [[], /URL and the enrollment token come first/],
    [["--fingerprint", PIN, "https://c:8443", "ske_a_b"], /URL and the enrollment token come first/],
    [["http://c:8443", "ske_a_b", "--fingerprint", PIN], /https:\/\/HOST\[:PORT\]/],
    [["https://c:8443", "ske_a_b"], /--fingerprint is required/],
    [["https://c:8443", "ske_a_b", "--fingerprint", "abc"], /a fingerprint is SHA256:<base64 of 32 bytes>/],
    [["https://c:8443", "ske_a_b", "--fingerprint", PIN, "--controller", "https://x"], /--controller is join's to set/],
    [["https://c:8443", "ske_a_b", "--fingerprint", PIN, "--ca-file=/x"], /--ca-file is join's to set/],
    [["https://c:8443", "ske_a_b", "--fingerprint", PIN, "--node-id", "a/b"], /the node id 'a\/b' is not an id/],
    [["https://c:8443", "ske_a_b", "--fingerprint"], /--fingerprint needs a value/],
  ])("refuses %j before doing anything", async (argv, message) => {
    const r = await run(argv as string[]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(message);
    expect(r.out).toBe("");
  });

  it("takes curl's sha256// form of the fingerprint too (refused later only for want of a controller)", async () => {
    const r = await run(["https://127.0.0.1:1", "ske_a_b", "--fingerprint", `sha256//${PIN.slice(7)}`, "--root", "/nonexistent-join-root"]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/ECONNREFUSED/);
    expect(r.err).toContain("Nothing was installed.");
  });
});

describe("the join line", () => {
  it("is curl under the pin piped to sh, with the token and the node when bound", () => {
    expect(joinLine({ url: "https://ctl.example:8443/", pin: PIN, token: "ske_a_b", nodeId: "host-4" })).toBe(
      `curl -fsS --pinnedpubkey sha256//${PIN.slice(7)} -k https://ctl.example:8443/v1/join.sh | sh -s -- ske_a_b --node-id host-4`,
    );
    expect(joinLine({ url: "https://ctl.example:8443/v1", pin: PIN, token: "ske_a_b" })).toBe(
      `curl -fsS --pinnedpubkey sha256//${PIN.slice(7)} -k https://ctl.example:8443/v1/join.sh | sh -s -- ske_a_b`,
    );
  });
});

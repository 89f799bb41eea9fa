import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SecretKeyRing } from "./secret-key-ring.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-keyring-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the secret key ring", () => {
  it("is generated once (0600) and opens what it sealed, for the same record only", async () => {
    const ring = await SecretKeyRing.load({ dataDir: dir });
    const file = join(dir, "tls", "secret-keys");
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const sealed = ring.seal(Buffer.from("hunter2"), "secret/shop/db");
    expect(sealed).not.toContain("hunter2");
    const again = await SecretKeyRing.load({ dataDir: dir });
    expect(again.open(sealed, "secret/shop/db").toString()).toBe("hunter2");
    expect(() => again.open(sealed, "secret/other/db")).toThrow();
    const tampered = sealed.replace(
      /\.([A-Za-z0-9_-])([A-Za-z0-9_-]*)\.([A-Za-z0-9_-]{22})$/,
      (_m, a, b, tag) => `.${a === "A" ? "B" : "A"}${b}.${tag}`,
    );
    expect(() => again.open(tampered, "secret/shop/db")).toThrow();
  });

  it("rotation seals with the new key and still opens the old; retiring drops the old keys", async () => {
    const ring = await SecretKeyRing.load({ dataDir: dir });
    const old = ring.seal(Buffer.from("v1"), "c");
    const oldId = ring.primaryId;
    const newId = await ring.rotate();
    expect(newId).not.toBe(oldId);
    const fresh = ring.seal(Buffer.from("v2"), "c");
    expect(SecretKeyRing.keyIdOf(fresh)).toBe(newId);
    const reloaded = await SecretKeyRing.load({ dataDir: dir });
    expect([reloaded.open(old, "c").toString(), reloaded.open(fresh, "c").toString()]).toEqual(["v1", "v2"]);
    expect(await reloaded.retire()).toEqual([oldId]);
    expect(() => reloaded.open(old, "c")).toThrow(/no longer holds/);
    expect((await readFile(join(dir, "tls", "secret-keys"), "utf8")).trim().split("\n")).toHaveLength(1);
  });

  it("takes the ring from the environment or a file, and refuses a malformed one with its source named", async () => {
    const text = `k1 ${Buffer.alloc(32, 7).toString("base64")}\n`;
    const fromEnv = await SecretKeyRing.load({ dataDir: dir, keysText: text });
    expect(fromEnv.primaryId).toBe("k1");
    await expect(fromEnv.rotate()).rejects.toThrow(/SKIPPER_SECRET_KEYS/);
    await expect(SecretKeyRing.load({ dataDir: dir, keysText: "k1 short" })).rejects.toThrow(/SKIPPER_SECRET_KEYS: each line/);
    await expect(SecretKeyRing.load({ dataDir: dir, keysFile: join(dir, "missing") })).rejects.toThrow(
      /cannot read SKIPPER_SECRET_KEYS_FILE/,
    );
  });

  it("configured by file: a rotation reads the file again, and a value sealed with a key added there since opens", async () => {
    const file = join(dir, "keys");
    const k1 = `k1 ${Buffer.alloc(32, 1).toString("base64")}\n`;
    const k2 = `k2 ${Buffer.alloc(32, 2).toString("base64")}\n`;
    await writeFile(file, k1);
    // Two controllers sharing the file.
    const a = await SecretKeyRing.load({ dataDir: dir, keysFile: file });
    const b = await SecretKeyRing.load({ dataDir: dir, keysFile: file });
    const old = a.seal(Buffer.from("v"), "secret/x/y");
    // The operator puts a new key first; one controller is asked to rotate.
    await writeFile(file, k2 + k1);
    await a.reload();
    expect(a.primaryId).toBe("k2");
    const fresh = a.seal(Buffer.from("w"), "secret/x/y");
    expect(SecretKeyRing.keyIdOf(fresh)).toBe("k2");
    // The other has not read the file since: it does when it meets the new key.
    expect(b.primaryId).toBe("k1");
    expect(b.open(fresh, "secret/x/y").toString()).toBe("w");
    // and seals with it from then on, without being asked to rotate
    expect(SecretKeyRing.keyIdOf(b.seal(Buffer.from("x"), "secret/x/z"))).toBe("k2");
    expect(b.primaryId).toBe("k2");
    expect(b.open(old, "secret/x/y").toString()).toBe("v");
    // A key in neither the ring nor the file is still refused.
    await writeFile(file, k2);
    await a.reload();
    expect(() => a.open(old, "secret/x/y")).toThrow(/no longer holds/);
  });
});

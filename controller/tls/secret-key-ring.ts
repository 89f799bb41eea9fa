// The key-encryption keys that seal secrets at rest (secret values, webhook URLs and their shared
// secrets): AES-256-GCM, a fresh 96-bit nonce per value, and the record it belongs to as
// additional authenticated data, so a sealed value copied into another record does not open.
//
// Where the keys come from, first found:
//   SKIPPER_SECRET_KEYS        the key ring's text itself (for containers and secret managers)
//   SKIPPER_SECRET_KEYS_FILE   a file holding it (what several controllers on one database share)
//   <dataDir>/tls/secret-keys  generated on first start, mode 0600, beside the TLS material
//
// The text is one key a line, "<id> <32 bytes in base64>", newest first; the first seals, all
// open. Rotation puts a new key first (rotate()), and the holders of sealed values re-seal them
// with it; an old key is dropped once nothing it sealed is left (retire()). A ring configured by
// file is the operator's: they put the new key first in the file and ask for a rotation, which
// reads the file again (reload()) and re-seals; a controller meeting a value sealed with a key it
// does not know reads its file again too, so controllers sharing the file need no restart.
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "./pem-files.js";
import { TlsError } from "./tls-error.js";

const SEALED = /^v1\.([a-z0-9]{1,16})\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]*)\.([A-Za-z0-9_-]{22})$/;
const LINE = /^([a-z0-9]{1,16})\s+([A-Za-z0-9+/]{43}=)$/;

/** One key of the ring. */
interface RingKey {
  id: string;
  key: Buffer;
}

/** Where the ring was read from: the generated file can be rewritten by rotate() and retire(). */
export type KeyRingSource = { kind: "generated"; file: string } | { kind: "file"; file: string } | { kind: "environment" };

export class SecretKeyRing {
  // A ring configured by file: the file's stamp (stampOf) when it was last read.
  private readStamp = "";

  private constructor(
    private keys: RingKey[],
    readonly source: KeyRingSource,
  ) {
    if (source.kind === "file") this.readStamp = stampOf(source.file);
  }

  /** Loads the ring (generating it on first start when no key is configured). */
  static async load(opts: { dataDir: string; keysText?: string; keysFile?: string }): Promise<SecretKeyRing> {
    if (opts.keysText !== undefined && opts.keysText !== "")
      return new SecretKeyRing(parseRing(opts.keysText, "SKIPPER_SECRET_KEYS"), { kind: "environment" });
    if (opts.keysFile) {
      let text: string;
      try {
        text = await readFile(opts.keysFile, "utf8");
      } catch (e) {
        throw new TlsError(
          "TLS_FILE_UNREADABLE",
          `cannot read SKIPPER_SECRET_KEYS_FILE ${opts.keysFile}: ${(e as NodeJS.ErrnoException).code ?? e}`,
        );
      }
      return new SecretKeyRing(parseRing(text, opts.keysFile), { kind: "file", file: opts.keysFile });
    }
    const dir = resolve(opts.dataDir, "tls");
    const file = join(dir, "secret-keys");
    await ensurePrivateDir(dir);
    const stored = await readIfExists(file);
    if (stored !== undefined) return new SecretKeyRing(parseRing(stored, file), { kind: "generated", file });
    const ring = new SecretKeyRing([newKey([])], { kind: "generated", file });
    await ring.save();
    return ring;
  }

  /** The id of the key that seals new values. */
  get primaryId(): string {
    return this.keys[0]!.id;
  }

  /** Every key id, newest first. */
  get ids(): string[] {
    return this.keys.map((k) => k.id);
  }

  /** Seals `plain` for the record named by `context` (e.g. "secret/shop/db"). */
  seal(plain: Buffer, context: string): string {
    // With the newest key the file holds: the operator may have put one first since.
    this.refresh();
    const { id, key } = this.keys[0]!;
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", key, iv);
    cipher.setAAD(Buffer.from(context, "utf8"));
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return `v1.${id}.${iv.toString("base64url")}.${body.toString("base64url")}.${cipher.getAuthTag().toString("base64url")}`;
  }

  /** Opens what seal() made for the same `context`; throws when it was not, or was changed. */
  open(sealed: string, context: string): Buffer {
    const m = SEALED.exec(sealed);
    if (!m) throw new Error("not a sealed value");
    let key = this.keys.find((k) => k.id === m[1]);
    // Another controller sharing the key file may have sealed it with a key added there since
    // this one read the file: read it again if it changed.
    if (!key) {
      this.refresh();
      key = this.keys.find((k) => k.id === m[1]);
    }
    if (!key) throw new Error(`sealed with key ${m[1]}, which the key ring no longer holds`);
    const decipher = createDecipheriv("aes-256-gcm", key.key, Buffer.from(m[2]!, "base64url"));
    decipher.setAAD(Buffer.from(context, "utf8"));
    decipher.setAuthTag(Buffer.from(m[4]!, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(m[3]!, "base64url")), decipher.final()]);
  }

  /**
   * A short fingerprint of `plain` for the record named by `context`: an HMAC under a key derived
   * from the newest key, so equal values are told apart from changed ones without showing them,
   * and the data directory alone does not let anyone guess a value from it.
   */
  fingerprint(plain: Buffer, context: string): string {
    this.refresh();
    const derived = createHmac("sha256", this.keys[0]!.key).update("skipper secret fingerprint").digest();
    return createHmac("sha256", derived).update(context).update("\0").update(plain).digest("hex").slice(0, 16);
  }

  /** The key id a sealed value was sealed with. */
  static keyIdOf(sealed: string): string | undefined {
    return SEALED.exec(sealed)?.[1];
  }

  /**
   * Reads a ring configured by file again (the operator put a new key first, or dropped old
   * ones): from now on its first key seals. A generated or environment ring is as it was.
   */
  async reload(): Promise<void> {
    if (this.source.kind !== "file") return;
    const stamp = stampOf(this.source.file);
    this.keys = parseRing(await readFile(this.source.file, "utf8"), this.source.file);
    this.readStamp = stamp;
  }

  // A ring configured by file, read again when the file changed since (a stat per seal: seals
  // are writes of secrets and webhooks, not a hot path). A file that does not parse (being
  // edited) leaves the ring as it was.
  private refresh(): void {
    if (this.source.kind !== "file") return;
    const stamp = stampOf(this.source.file);
    if (stamp === this.readStamp) return;
    try {
      this.keys = readRingFile(this.source.file);
      this.readStamp = stamp;
    } catch {
      // Kept: the next seal or open tries again.
    }
  }

  /** Puts a new key first (it seals from now on); returns its id. Only a generated ring is rewritten. */
  async rotate(): Promise<string> {
    this.mustOwnFile();
    this.keys = [newKey(this.keys), ...this.keys];
    await this.save();
    return this.primaryId;
  }

  /** Drops every key but the primary: call once nothing sealed with them is left. */
  async retire(): Promise<string[]> {
    this.mustOwnFile();
    const dropped = this.keys.slice(1).map((k) => k.id);
    this.keys = this.keys.slice(0, 1);
    await this.save();
    return dropped;
  }

  private mustOwnFile(): void {
    if (this.source.kind !== "generated") {
      throw new Error("the secret keys come from SKIPPER_SECRET_KEYS(_FILE): add the new key to the first line there, then re-seal");
    }
  }

  private async save(): Promise<void> {
    if (this.source.kind === "environment") return;
    await writeFileAtomic(this.source.file, ringText(this.keys), 0o600);
  }
}

/** The text of a key ring (what SKIPPER_SECRET_KEYS holds). */
export function ringText(keys: ReadonlyArray<{ id: string; key: Buffer }>): string {
  return `${keys.map((k) => `${k.id} ${k.key.toString("base64")}`).join("\n")}\n`;
}

// What tells one version of the file from the next: times and size (two writes within one tick
// of the clock still differ in ctime or size, or are the same text).
function stampOf(file: string): string {
  try {
    const s = statSync(file);
    return `${s.mtimeMs}/${s.ctimeMs}/${s.size}/${s.ino}`;
  } catch {
    return "";
  }
}

function readRingFile(file: string): RingKey[] {
  return parseRing(readFileSync(file, "utf8"), file);
}

function parseRing(text: string, where: string): RingKey[] {
  const keys = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"))
    .map((l) => {
      const m = LINE.exec(l);
      if (!m) throw new TlsError("TLS_KEY_INVALID", `${where}: each line must be "<id> <32 bytes in base64>" (id: 1-16 of a-z0-9)`);
      return { id: m[1]!, key: Buffer.from(m[2]!, "base64") };
    });
  if (keys.length === 0) throw new TlsError("TLS_KEY_INVALID", `${where} holds no key`);
  if (new Set(keys.map((k) => k.id)).size !== keys.length) throw new TlsError("TLS_KEY_INVALID", `${where} names a key id twice`);
  return keys;
}

function newKey(existing: RingKey[]): RingKey {
  let id = randomBytes(4).toString("hex");
  while (existing.some((k) => k.id === id)) id = randomBytes(4).toString("hex");
  return { id, key: randomBytes(32) };
}

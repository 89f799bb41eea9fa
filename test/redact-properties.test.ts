// Properties of redaction over generated compose files and messages (fast-check): secret values
// under secret-looking keys, in KEY=value lists and in URL passwords never survive, whatever the
// format (block YAML, flow YAML, JSON, or a file that does not parse); everything else is kept in
// its place; redacting twice changes nothing; the result of a parsable file parses to the same
// shape; and restoring from the unredacted file gives back its exact bytes.
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { parse, stringify } from "yaml";
import { redact, redactCompose, redactText, REDACTED } from "../common/logging/redact.js";
import { restoreCompose, restoreEnv } from "../common/logging/restore-secrets.js";

const RUNS = 200;

// Secrets start with "zq" and nothing else generated holds a z or a q, so a secret found in the
// output is one that leaked, never a coincidence.
const SECRET_CHARS = "abcdefghijklmnoprstuvwxy0123456789 !#$%&*+,-./:;<=>?@[]^_{|}~'\"\\".split("");
const URL_SAFE = "abcdefghijklmnoprstuvwxy0123456789-._~!*".split("");
const WORD_CHARS = "abcdefghijklmnoprstuvwxy0123456789-_./".split("");

const chars = (alphabet: string[], min: number, max: number) =>
  fc.array(fc.constantFrom(...alphabet), { minLength: min, maxLength: max }).map((cs) => cs.join(""));
const secretValue = chars(SECRET_CHARS, 2, 30).map((s) => `zq${s}`);
const urlPassword = chars(URL_SAFE, 2, 20).map((s) => `zq${s}`);
const plainValue = chars(WORD_CHARS, 1, 20).filter((s) => !/^[-.]|^(y|n|on|off|yes|no|true|false|null)$/i.test(s));
const secretKey = fc
  .tuple(
    fc.constantFrom("DB", "API", "APP", "REDIS", "STRIPE", "GITHUB", "AWS", "SMTP"),
    fc.constantFrom("PASSWORD", "TOKEN", "SECRET", "KEY", "API_KEY", "PRIVATE_KEY", "ACCESS_KEY", "PASS", "CLIENT_SECRET", "PASSPHRASE"),
    fc.boolean(),
  )
  .map(([a, b, lower]) => (lower ? `${a}_${b}`.toLowerCase() : `${a}_${b}`));
const plainKey = fc.constantFrom("MODE", "PORT", "LOG_LEVEL", "HOST", "REGION", "WORKERS", "FEATURES", "CACHE_DIR");
const urlKey = fc.constantFrom("DATABASE_URL", "UPSTREAM", "BROKER_URI", "SENTRY_DSN", "CALLBACK");

type Entry = { key: string; value: string; secrets: string[]; redacted: string };
const entry: fc.Arbitrary<Entry> = fc.oneof(
  fc.tuple(secretKey, secretValue).map(([key, value]) => ({ key, value, secrets: [value], redacted: REDACTED })),
  fc.tuple(plainKey, plainValue).map(([key, value]) => ({ key, value, secrets: [], redacted: value })),
  fc.tuple(urlKey, urlPassword, fc.constantFrom("postgres", "redis", "amqp", "https")).map(([key, pw, scheme]) => ({
    key,
    value: `${scheme}://app:${pw}@db.internal:5432/app`,
    secrets: [pw],
    redacted: `${scheme}://app:${REDACTED}@db.internal:5432/app`,
  })),
);
const env = fc.uniqueArray(entry, { minLength: 1, maxLength: 6, selector: (e) => e.key.toUpperCase() });
const service = fc.record({ name: fc.constantFrom("api", "db", "web", "worker", "cache"), env, asList: fc.boolean(), image: plainValue });
const project = fc.uniqueArray(service, { minLength: 1, maxLength: 3, selector: (s) => s.name });
type Project = typeof project extends fc.Arbitrary<infer P> ? P : never;

/** The compose document of `p`, with each value as it is (or as redaction should leave it). */
function composeDoc(p: Project, redacted = false): Record<string, unknown> {
  const value = (e: Entry) => (redacted ? e.redacted : e.value);
  const services = Object.fromEntries(
    p.map((s) => [
      s.name,
      {
        image: s.image,
        environment: s.asList ? s.env.map((e) => `${e.key}=${value(e)}`) : Object.fromEntries(s.env.map((e) => [e.key, value(e)])),
      },
    ]),
  );
  return { services };
}

const FORMATS = {
  block: (d: unknown) => stringify(d),
  flow: (d: unknown) => stringify(d, { collectionStyle: "flow" }),
  json: (d: unknown) => JSON.stringify(d, null, 2),
  compactJson: (d: unknown) => JSON.stringify(d),
};
const secretsOf = (p: Project) => p.flatMap((s) => s.env.flatMap((e) => e.secrets));

describe("redactCompose over generated compose files", () => {
  for (const [format, write] of Object.entries(FORMATS)) {
    it(`${format}: no secret survives, everything else keeps its place, and the result parses`, () => {
      fc.assert(
        fc.property(project, (p) => {
          const out = redactCompose(write(composeDoc(p)));
          for (const s of secretsOf(p)) expect(out).not.toContain(s);
          expect(parse(out)).toEqual(composeDoc(p, true));
        }),
        { numRuns: RUNS },
      );
    });

    it(`${format}: redacting twice is redacting once, and restoring gives back the file`, () => {
      fc.assert(
        fc.property(project, (p) => {
          const file = write(composeDoc(p));
          const out = redactCompose(file);
          expect(redactCompose(out)).toBe(out);
          expect(restoreCompose(out, file)).toBe(file);
        }),
        { numRuns: RUNS },
      );
    });
  }

  it("a file that does not parse loses its secrets line by line and keeps the rest", () => {
    fc.assert(
      fc.property(project, (p) => {
        const file = `${stringify(composeDoc(p), { lineWidth: 0 })}  oops: [unclosed\n`;
        const out = redactCompose(file);
        for (const s of secretsOf(p)) expect(out).not.toContain(s);
        for (const s of p) for (const e of s.env) if (e.secrets.length === 0) expect(out).toContain(e.value);
      }),
      { numRuns: RUNS },
    );
  });
});

describe("redact over env maps", () => {
  it("hides secret values and URL passwords, keeps the rest, is idempotent and restorable", () => {
    fc.assert(
      fc.property(env, (entries) => {
        const envMap = Object.fromEntries(entries.map((e) => [e.key, e.value]));
        const out = redact({ env: envMap }).env;
        expect(out).toEqual(Object.fromEntries(entries.map((e) => [e.key, e.redacted])));
        expect(redact({ env: out }).env).toEqual(out);
        expect(restoreEnv(out, envMap)).toEqual(envMap);
      }),
      { numRuns: RUNS },
    );
  });
});

describe("redactText over generated messages", () => {
  const token = chars(
    URL_SAFE.filter((c) => c !== "!" && c !== "*"),
    6,
    24,
  ).map((s) => `zq9${s}`);
  const word = chars("abcdefghijklmnoprstuvwxy".split(""), 1, 10);
  const piece = fc.oneof(
    word.map((w) => ({ text: w, secret: undefined as string | undefined })),
    fc.tuple(secretKey, token, fc.constantFrom("=", ": ", " = ")).map(([k, v, sep]) => ({ text: `${k}${sep}${v}`, secret: v })),
    fc.tuple(secretKey, token).map(([k, v]) => ({ text: `"${k}": "${v}"`, secret: v })),
    urlPassword.map((pw) => ({ text: `dial postgres://app:${pw}@db:5432/app failed`, secret: pw })),
    token.map((t) => ({ text: `Authorization: Bearer ${t}`, secret: t })),
  );
  it("no secret survives and the plain words stay", () => {
    fc.assert(
      fc.property(fc.array(piece, { minLength: 1, maxLength: 8 }), fc.constantFrom(" ", "; ", ", ", "\n"), (pieces, glue) => {
        const out = redactText(pieces.map((x) => x.text).join(glue));
        for (const x of pieces) {
          if (x.secret !== undefined) expect(out).not.toContain(x.secret);
          else expect(out).toContain(x.text);
        }
        expect(redactText(out)).toBe(out);
      }),
      { numRuns: RUNS },
    );
  });
});

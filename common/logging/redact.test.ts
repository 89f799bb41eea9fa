// Examples of what redaction hides and keeps, one per shape a secret arrives in. The properties
// over generated inputs are in test/redact-properties.test.ts.
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { redact, redactCompose, redactText, REDACTED } from "./redact.js";
import { restoreCompose, restoreEnv, SecretsUnavailable } from "./restore-secrets.js";

describe("redactCompose", () => {
  it("hides environment values in block YAML, keeps the rest byte for byte", () => {
    const file = [
      "# the app",
      "services:",
      "  db:",
      "    image: postgres:16",
      "    environment:",
      "      POSTGRES_PASSWORD: hunter2",
      "      POSTGRES_USER: app",
      "      DB_PIN: 123456",
      "",
    ].join("\n");
    expect(redactCompose(file)).toBe(file.replace("hunter2", `"${REDACTED}"`).replace("123456", `"${REDACTED}"`));
  });

  it("hides values in flow YAML maps and KEY=value lists", () => {
    const file = "services: {api: {image: x, environment: {DB_PASSWORD: s3cret, MODE: prod}}, w: {environment: [API_TOKEN=t0ken, A=b]}}\n";
    const out = redactCompose(file);
    expect(out).not.toMatch(/s3cret|t0ken/);
    expect(parse(out)).toEqual({
      services: {
        api: { image: "x", environment: { DB_PASSWORD: REDACTED, MODE: "prod" } },
        w: { environment: [`API_TOKEN=${REDACTED}`, "A=b"] },
      },
    });
  });

  it("hides values in a JSON compose file and the result is still JSON", () => {
    const file = JSON.stringify({ services: { api: { environment: { SECRET_KEY: "abc def", PORT: "80" } } } }, null, 2);
    const out = redactCompose(file);
    expect(JSON.parse(out)).toEqual({ services: { api: { environment: { SECRET_KEY: REDACTED, PORT: "80" } } } });
  });

  it("hides URL credentials and connection strings, keeping user and host", () => {
    const file = [
      "services:",
      "  api:",
      "    environment:",
      "      - DATABASE_URL=postgres://app:pa55w0rd@db:5432/app",
      "      - MYSQL_DSN=app:hunter2@tcp(db:3306)/app",
      "    command: [--upstream, 'https://bot:ghp_x1y2@github.com/org/repo.git']",
      "",
    ].join("\n");
    const out = redactCompose(file);
    expect(out).not.toMatch(/pa55w0rd|hunter2|ghp_x1y2/);
    expect(out).toContain(`postgres://app:${REDACTED}@db:5432/app`);
    expect(out).toContain(`app:${REDACTED}@tcp(db:3306)/app`);
    expect(out).toContain(`https://bot:${REDACTED}@github.com/org/repo.git`);
  });

  it("hides an anchored value used under a secret key, block scalars and comments", () => {
    const file = [
      "x-db: &pw not-so-secret",
      "services:",
      "  db:",
      "    environment:",
      "      DB_PASSWORD: *pw",
      "      TLS_PRIVATE_KEY: |",
      "        -----BEGIN KEY-----",
      "        abcdef",
      "    # old: DB_PASSWORD=letmein",
      "",
    ].join("\n");
    const out = redactCompose(file);
    expect(out).not.toMatch(/not-so-secret|abcdef|letmein/);
    expect(parse(out).services.db.environment.TLS_PRIVATE_KEY).toBe(REDACTED);
  });

  it("keeps the names under compose's secrets element", () => {
    const file = "services:\n  db:\n    secrets: [db_password]\nsecrets:\n  db_password:\n    file: ./db_password.txt\n";
    expect(redactCompose(file)).toBe(file);
  });

  it("scrubs a file that does not parse line by line", () => {
    const file = "services:\n  db:\n    environment:\n      DB_PASSWORD: hunter2\n   bad: [indent\n      URL: redis://:s3cr3t@cache\n";
    const out = redactCompose(file);
    expect(out).not.toMatch(/hunter2|s3cr3t/);
    expect(out).toContain("bad: [indent");
  });
});

describe("redactText", () => {
  it("hides secrets in a node's free-text message", () => {
    const msg =
      "compose up failed: DB_PASSWORD=hunter2 rejected; dial postgres://u:pw1234@db:5432 failed; Authorization: Bearer eyJhbGciOi.x.y; api_key: 'k-123'";
    const out = redactText(msg);
    expect(out).not.toMatch(/hunter2|pw1234|eyJhbGciOi|k-123/);
    expect(out).toContain("postgres://u:[REDACTED]@db:5432");
    expect(out).toContain("compose up failed");
  });

  it("leaves ordinary text alone", () => {
    const msg = "service api: 2 of 3 containers running at http://localhost:8080/health; key=value pairs, page_token=abc";
    expect(redactText(msg)).toBe(msg);
  });
});

describe("redact", () => {
  it("hides env values and result messages, and keeps API counters", () => {
    const out = redact({
      env: { DB_PASSWORD: "hunter2", DATABASE_URL: "postgres://a:b1@h/d", LOG_LEVEL: "debug" },
      message: "failed with token=abc123",
      fencing_token: "3",
    });
    expect(out).toEqual({
      env: { DB_PASSWORD: REDACTED, DATABASE_URL: `postgres://a:${REDACTED}@h/d`, LOG_LEVEL: "debug" },
      message: `failed with token=${REDACTED}`,
      fencing_token: "3",
    });
  });
});

describe("restore", () => {
  it("fills a redacted compose file from the current one, byte for byte when nothing changed", () => {
    const file = "services:\n  db:\n    image: postgres:16\n    environment: {POSTGRES_PASSWORD: 'hunter2', URL: 'postgres://a:b1@h/d'}\n";
    expect(restoreCompose(redactCompose(file), file)).toBe(file);
  });

  it("keeps the stored non-secret parts and takes the current secrets", () => {
    const old = redactCompose("services:\n  db:\n    image: postgres:15\n    environment:\n      - DB_PASSWORD=old\n");
    const now = "services:\n  db:\n    image: postgres:16\n    environment:\n      - DB_PASSWORD=new\n";
    expect(parse(restoreCompose(old, now))).toEqual({ services: { db: { image: "postgres:15", environment: ["DB_PASSWORD=new"] } } });
  });

  it("refuses when a secret is no longer anywhere", () => {
    const old = redactCompose("services:\n  db:\n    environment:\n      DB_PASSWORD: x\n");
    expect(() => restoreCompose(old, "services: {}\n")).toThrow(SecretsUnavailable);
    expect(() => restoreEnv({ API_TOKEN: REDACTED }, {})).toThrow(/env.API_TOKEN/);
  });
});

describe("references to secrets", () => {
  it("are kept (their names look secret, their values are ids); the same names holding values are not", () => {
    const refs = {
      secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
      secret_files: { "tls.key": { secret_id: "tls", key: "key" } },
      secretUses: [{ secretId: "db", key: "password", version: 2n }],
      registry_secret_ids: ["registry-login"],
    };
    expect(redact(refs)).toEqual(refs);
    expect(redact({ env: { secret_env: "hunter2", SECRET_FILES: "x" } })).toEqual({
      env: { secret_env: "[REDACTED]", SECRET_FILES: "[REDACTED]" },
    });
    expect(redact({ secret_env: { DB_PASSWORD: "hunter2" } })).toEqual({ secret_env: { DB_PASSWORD: "[REDACTED]" } });
    expect(redact({ registry_secret_ids: "hunter2-as-a-string" })).toEqual({ registry_secret_ids: "[REDACTED]" });
  });
});

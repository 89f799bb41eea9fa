// The controller's limits are set by flag or environment (flags win), and bad values are refused
// with a message that names the setting.
import { describe, expect, it } from "vitest";
import { loadConfig, type ControllerConfig } from "./config.js";

const load = (argv: string[], env: NodeJS.ProcessEnv = {}) => loadConfig(argv, env) as ControllerConfig;

describe("limit settings", () => {
  it("are unset (the listener's defaults apply) when not given", () => {
    const c = load([]);
    expect(Object.values(c.limits).every((v) => v === undefined)).toBe(true);
    expect(c.maxRequestBytes).toBeUndefined();
    expect(c.maxWatchStreamsPerNode).toBeUndefined();
  });

  it("come from flags, then the environment", () => {
    const c = load(["--request-idle-timeout", "90s", "--max-connections-per-address", "2000"], {
      SKIPPER_REQUEST_IDLE_TIMEOUT: "5s",
      SKIPPER_HANDSHAKE_TIMEOUT: "3s",
      SKIPPER_MAX_WATCH_STREAMS_PER_NODE: "1",
      SKIPPER_MAX_REQUEST_BYTES: "1048576",
      SKIPPER_MAX_CONNECTIONS: "0",
    });
    expect(c.limits).toMatchObject({ requestIdleMs: 90_000, handshakeTimeoutMs: 3000, maxConnectionsPerAddress: 2000, maxConnections: 0 });
    expect(c.maxWatchStreamsPerNode).toBe(1);
    expect(c.maxRequestBytes).toBe(1_048_576);
    expect(load(["--unvouched-grace", "0"]).limits.unvouchedGraceMs).toBe(0);
    expect(load([], { SKIPPER_UNVOUCHED_GRACE: "5s" }).limits.unvouchedGraceMs).toBe(5000);
    expect(load(["--max-waiting-connections", "0", "--connection-wait", "45s"]).limits).toMatchObject({
      maxWaitingConnections: 0,
      connectionWaitMs: 45_000,
    });
    expect(() => load([], { SKIPPER_CONNECTION_WAIT: "50ms" })).toThrow(/--connection-wait/);
  });

  it("refuse values that are not whole numbers or durations, naming the setting", () => {
    expect(() => load(["--max-connections", "lots"])).toThrow(/--max-connections/);
    expect(() => load(["--max-streams-per-connection", "0"])).toThrow(/at least 1/);
    expect(() => load([], { SKIPPER_MAX_REQUEST_BYTES: "100" })).toThrow(/--max-request-bytes/);
    expect(() => load(["--session-idle-timeout", "soon"])).toThrow(/--session-idle-timeout/);
    expect(() => load(["--unvouched-grace", "soon"])).toThrow(/--unvouched-grace/);
  });
});

describe("store setting", () => {
  it("is the file store unless a PostgreSQL URL is given, by flag or environment", () => {
    expect(loadConfig([], {})).toMatchObject({ storeUrl: undefined });
    expect(loadConfig(["--store", "file"], {})).toMatchObject({ storeUrl: undefined });
    const url = "postgres://skipper:secret@db.internal:5432/skipper";
    expect(loadConfig([], { SKIPPER_STORE_URL: url })).toMatchObject({ storeUrl: url });
    expect(loadConfig(["--store", "postgresql://h/db"], { SKIPPER_STORE_URL: url })).toMatchObject({ storeUrl: "postgresql://h/db" });
  });

  it("takes a connection budget for PostgreSQL of at least 4, by flag or environment", () => {
    expect(loadConfig([], {})).toMatchObject({ storeConnections: undefined });
    expect(loadConfig([], { SKIPPER_STORE_CONNECTIONS: "12" })).toMatchObject({ storeConnections: 12 });
    expect(() => loadConfig(["--store-connections", "2"], {})).toThrow(/--store-connections/);
  });

  it("refuses other URLs without echoing them (they may hold a password)", () => {
    for (const bad of ["mysql://u:hunter2@h/db", "hunter2", "postgres://u:hunter2@/db"]) {
      let message = "";
      try {
        loadConfig(["--store", bad], {});
      } catch (e) {
        message = (e as Error).message;
      }
      expect(message).toMatch(/--store/);
      expect(message).not.toContain("hunter2");
    }
  });
});

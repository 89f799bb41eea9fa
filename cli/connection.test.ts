// Which controller a command calls: flags over environment over the context; contexts read from
// the config file under XDG_CONFIG_HOME, written with mode 0600.
import { mkdtemp, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { configPath, readConfig, writeConfig } from "./config-file.js";
import { normalizeServer, resolveTarget } from "./connection.js";

describe("connection targets", () => {
  it("flags win over the environment, which wins over the current context", async () => {
    const env: NodeJS.ProcessEnv = { XDG_CONFIG_HOME: await mkdtemp(join(tmpdir(), "skipper-config-")) };
    const path = configPath(env);
    expect(path).toBe(join(env.XDG_CONFIG_HOME!, "skipper", "config.yaml"));
    writeConfig(path, {
      currentContext: "lab",
      contexts: { lab: { server: "https://lab:8443/", caFile: "/lab/ca.crt", token: "ska.lab" }, prod: { server: "https://prod:8443" } },
    });
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(readConfig(path).contexts.lab).toEqual({ server: "https://lab:8443/", caFile: "/lab/ca.crt", token: "ska.lab" });

    expect(resolveTarget({}, env)).toEqual({ server: "https://lab:8443", caFile: "/lab/ca.crt", token: "ska.lab", contextName: "lab" });
    expect(resolveTarget({}, { ...env, SKIPPER_SERVER: "https://env:1", SKIPPER_TOKEN: "ska.env" })).toMatchObject({
      server: "https://env:1",
      token: "ska.env",
    });
    // The context's token and CA are its server's: another server does not get them.
    const elsewhere = resolveTarget({ server: "https://elsewhere:8443" }, env);
    expect(elsewhere.token).toBeUndefined();
    expect(elsewhere.caFile).toBeUndefined();
    expect(resolveTarget({ server: "https://lab:8443/v1" }, env).token).toBe("ska.lab");
    expect(resolveTarget({ server: "https://flag:2", token: "ska.flag" }, { ...env, SKIPPER_SERVER: "https://env:1" })).toMatchObject({
      server: "https://flag:2",
      token: "ska.flag",
    });
    expect(resolveTarget({ context: "prod" }, env)).toEqual({ server: "https://prod:8443", contextName: "prod" });
    expect(() => resolveTarget({ context: "nope" }, env)).toThrow(/no context named "nope"/);
  });

  it("without a context or flag there is nothing to call, and the error says how to log in", () => {
    expect(() => resolveTarget({}, { HOME: "/nonexistent" })).toThrow("no controller to talk to");
  });

  it("server URLs lose a trailing slash and /v1; anything but http(s) is refused", () => {
    expect(normalizeServer("https://127.0.0.1:8443/v1/")).toBe("https://127.0.0.1:8443");
    expect(() => normalizeServer("127.0.0.1:8443")).toThrow(/must be an https:\/\/ URL|is not a URL/);
    expect(() => normalizeServer("ftp://x")).toThrow(/must be an https:\/\/ URL/);
  });
});

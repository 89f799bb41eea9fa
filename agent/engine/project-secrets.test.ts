import { mkdtemp, readFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { WorkOrderDesiredStateSchema } from "../../gen/skipper/v1/work_order_pb.js";
import {
  authKey,
  composeEnvironment,
  keepAppliedSecrets,
  namedInOrder,
  readAppliedSecrets,
  readSecretDir,
  writeSecretDir,
} from "./project-secrets.js";

describe("a project's secret directory", () => {
  it("files Docker Hub's login under the key the Docker CLI, Compose v2 and docker-py look up, and reads it back", async () => {
    expect(authKey("docker.io")).toBe("https://index.docker.io/v1/");
    expect(authKey("registry-1.docker.io")).toBe("https://index.docker.io/v1/");
    expect(authKey("127.0.0.1:5000")).toBe("127.0.0.1:5000");
    const dir = join(await mkdtemp(join(tmpdir(), "skippy-secrets-")), ".skipper-secrets");
    const values = {
      env: { API_TOKEN: "t0ken" },
      files: { "tls.key": "PRIVATE" },
      registries: [
        { registry: "docker.io", username: "u", password: "p:with:colons" },
        { registry: "127.0.0.1:5000", username: "v", password: "q" },
      ],
    };
    await writeSecretDir(dir, values);
    const config = JSON.parse(await readFile(join(dir, ".docker", "config.json"), "utf8")) as { auths: Record<string, unknown> };
    expect(Object.keys(config.auths).sort()).toEqual(["127.0.0.1:5000", "https://index.docker.io/v1/"]);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect((await stat(join(dir, "tls.key"))).mode & 0o777).toBe(0o600);
    const back = await readSecretDir(dir);
    expect(back.env).toEqual(values.env);
    expect(back.files).toEqual(values.files);
    expect(back.registries.sort((a, b) => a.registry.localeCompare(b.registry))).toEqual(
      [...values.registries].sort((a, b) => a.registry.localeCompare(b.registry)),
    );
  });

  it("keeps the applied values tagged with their spec: a restore of another spec is refused", async () => {
    const project = await mkdtemp(join(tmpdir(), "skippy-project-"));
    await writeSecretDir(join(project, ".skipper-secrets"), { env: { A: "1" }, files: {}, registries: [] });
    await keepAppliedSecrets(project, "spec-1");
    expect((await readAppliedSecrets(project, "spec-1")).env).toEqual({ A: "1" });
    await expect(readAppliedSecrets(project, "spec-2")).rejects.toThrow(/for spec spec-1, not spec-2/);
  });

  it("takes from a reply only the names the order asked for, and hides the agent's own secrets from Compose", () => {
    const ds = create(WorkOrderDesiredStateSchema, {
      composeProject: { secretEnv: { API_TOKEN: { secretId: "s", key: "t" } }, secretFiles: { "tls.key": { secretId: "s", key: "k" } } },
    });
    const picked = namedInOrder(ds, {
      env: { API_TOKEN: "x", LD_PRELOAD: "/evil.so" },
      files: { "tls.key": "k", "../escape": "y" },
      registries: [],
    });
    expect(picked).toEqual({ env: { API_TOKEN: "x" }, files: { "tls.key": "k" }, registries: [] });
    process.env.SKIPPY_NODE_TOKEN = "node-token";
    try {
      const env = composeEnvironment({ MODE: "fine", PATH: "/x" }, "/p/.skipper-secrets", picked);
      expect(env).toMatchObject({ SKIPPY_NODE_TOKEN: undefined, MODE: undefined, API_TOKEN: "x" });
      expect("SKIPPY_NODE_TOKEN" in env).toBe(true);
      expect("PATH" in env).toBe(false);
    } finally {
      delete process.env.SKIPPY_NODE_TOKEN;
    }
  });
});

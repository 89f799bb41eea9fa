// A new user's first start: the admin token minted by a start that then cannot listen (the port
// is taken) is still printed, so it is not lost with the data directory it was stored in; later
// starts say where the token comes from, and a call without it says what to send.
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { rpcError } from "./helpers/errors.js";
import { freePort, stopProcess } from "./helpers/processes.js";

const MAIN = fileURLToPath(new URL("../dist/controller/main.js", import.meta.url));

let root = "";
let blocker: Server | undefined;
afterAll(async () => {
  blocker?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

/** Runs the controller without SKIPPER_ADMIN_TOKEN; resolves with its stdout once it listens or exits. */
function run(dataDir: string, port: number): Promise<{ out: string; code: number | null; stop(): Promise<void> }> {
  const env = { ...process.env };
  delete env.SKIPPER_ADMIN_TOKEN;
  const child = spawn(process.execPath, [MAIN, "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  return new Promise((resolve) => {
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString("utf8");
      if (out.includes('"action":"listen"') && out.includes('"action":"auth"'))
        resolve({ out, code: null, stop: () => stopProcess(child) });
    });
    child.once("exit", (code) => resolve({ out, code, stop: async () => undefined }));
  });
}

describe("first start", () => {
  it("prints the minted admin token even when it cannot listen, and the token works on the next start", async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-first-start-"));
    const dataDir = join(root, "data");
    blocker = createServer();
    const taken = await new Promise<number>((r) => blocker!.listen(0, "127.0.0.1", () => r((blocker!.address() as { port: number }).port)));
    const failed = await run(dataDir, taken);
    expect(failed.code).not.toBe(0);
    const token = /export SKIPPER_ADMIN_TOKEN=(\S+)/.exec(failed.out)?.[1];
    expect(token).toBeDefined();

    const port = await freePort();
    const second = await run(dataDir, port);
    try {
      expect(second.out).not.toContain("export SKIPPER_ADMIN_TOKEN=");
      expect(second.out).toContain("--reset-admin-token");
      const ca = await readFile(join(dataDir, "tls", "ca.crt"), "utf8");
      const transport = (interceptors: Interceptor[]) =>
        createConnectTransport({
          baseUrl: `https://127.0.0.1:${port}/v1`,
          httpVersion: "2",
          nodeOptions: { ca, servername: "localhost" },
          interceptors,
        });
      const withToken: Interceptor = (next) => (req) => (req.header.set("x-admin-token", token!), next(req));
      const listed = await createClient(ResourceService, transport([withToken])).listResources({ resourceType: "tenant" });
      expect(listed.resources).toEqual([]);
      const refused = await rpcError(createClient(ResourceService, transport([])).listResources({ resourceType: "tenant" }));
      expect(refused.code).toBe("UNAUTHORIZED");
      expect(refused.message).toContain("--reset-admin-token");
    } finally {
      await second.stop();
    }
  }, 60_000);
});

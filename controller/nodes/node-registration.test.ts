// Registering nodes and rotating their tokens (nodes/node-registration.ts), through NodeService
// over the in-memory transport: a token is shown once and stored only as its hash, a second
// registration cannot take over a node, and a rotated token stops working at once.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { hashToken } from "../auth/tokens.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";

let c: InMemoryController;
const nodes = () => c.admin(NodeService);
const beatAs = (token: string, nodeId = "n1") => c.asNode(NodeService, token).heartbeat({ nodeId, agentVersion: "1.0" });
const typesOf = async (nodeId: string) => (await c.events({ resourceId: nodeId })).map((e) => e.type);

beforeEach(async () => {
  c = await startInMemory();
});
afterEach(async () => {
  await c.close();
});

describe("registering a node", () => {
  it("returns its token once, stores only the token's hash, and creates the node", async () => {
    const res = await nodes().registerNode({ nodeId: "n1", displayName: "Host one", labels: { env: "dev" } });
    expect(res.token).not.toBe("");
    const credential = (await c.ctl.store.getNodeCredential("n1"))!;
    expect(credential.tokenHash).toBe(hashToken(res.token));
    expect(credential.tokenHash).not.toContain(res.token);
    expect(await readFile(join(c.dataDir, "auth", "nodes", "n1.json"), "utf8")).not.toContain(res.token);
    const node = (await c.ctl.store.getResource("node", "n1"))!;
    expect(node.desiredState?.kind.case === "node" && node.desiredState.kind.value.displayName).toBe("Host one");
    expect(node.metadata?.labels).toEqual({ env: "dev" });
    expect(await typesOf("n1")).toEqual(["resource_created", "node_registered"]);
    await beatAs(res.token);
  });

  it("registering a node again is CONFLICT, and its token and credential stay as they were", async () => {
    const { token } = await nodes().registerNode({ nodeId: "n1" });
    const credential = await c.ctl.store.getNodeCredential("n1");
    const e = await rpcError(nodes().registerNode({ nodeId: "n1" }));
    expect(e.code).toBe("CONFLICT");
    expect(e.details.node_id).toBe("n1");
    expect(await c.ctl.store.getNodeCredential("n1")).toEqual(credential);
    expect(await typesOf("n1")).toEqual(["resource_created", "node_registered"]);
    await beatAs(token);
  });
});

describe("rotating a node's token", () => {
  it("a registration retried with its idempotency key gets a working token, not CONFLICT, and keeps none on disk", async () => {
    const key = { headers: { "x-idempotency-key": "register-n9-once" } };
    const first = await nodes().registerNode({ nodeId: "n9", labels: { env: "dev" } }, key);
    // The answer was lost: the same request again, same key.
    const retry = await nodes().registerNode({ nodeId: "n9", labels: { env: "dev" } }, key);
    expect(retry.node?.id).toBe("n9");
    expect(retry.token).not.toBe(first.token);
    expect(retry.token.startsWith("[")).toBe(false);
    await beatAs(retry.token, "n9");
    expect((await rpcError(beatAs(first.token, "n9"))).code).toBe("UNAUTHORIZED");
    // The same key with another body is CONFLICT; without a key a second registration still is.
    expect((await rpcError(nodes().registerNode({ nodeId: "n9" }, key))).code).toBe("CONFLICT");
    expect((await rpcError(nodes().registerNode({ nodeId: "n9", labels: { env: "dev" } }))).code).toBe("CONFLICT");
    // Neither token is stored in the clear.
    await c.ctl.reconciler.idle();
    const files = (await readdir(c.dataDir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
    const raw = (await Promise.all(files.map((e) => readFile(join(e.parentPath, e.name), "utf8")))).join("\n");
    expect(raw.includes(first.token) || raw.includes(retry.token)).toBe(false);
  });

  it("invalidates the old token at once and the new one works", async () => {
    const { token: old } = await nodes().registerNode({ nodeId: "n1" });
    const { token: fresh } = await nodes().rotateNodeToken({ nodeId: "n1" });
    expect(fresh).not.toBe(old);
    expect((await c.ctl.store.getNodeCredential("n1"))!.tokenHash).toBe(hashToken(fresh));
    expect((await rpcError(beatAs(old))).code).toBe("UNAUTHORIZED");
    await beatAs(fresh);
    expect(await typesOf("n1")).toContain("node_token_rotated");
  });

  it("is RESOURCE_NOT_FOUND for a node never registered, and stores no credential", async () => {
    expect((await rpcError(nodes().rotateNodeToken({ nodeId: "ghost" }))).code).toBe("RESOURCE_NOT_FOUND");
    expect(await c.ctl.store.getNodeCredential("ghost")).toBeUndefined();
  });
});

// An agent whose credential the controller refuses (its token rotated, or issued by another
// store) says what mends it, in one line per retry, instead of retrying as if the controller
// were unreachable.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { startAgentProcess, startControllerProcess, waitFor, type AgentProcess, type ControllerProcess } from "./helpers/processes.js";

let ctl: ControllerProcess | undefined;
let agent: AgentProcess | undefined;
let root = "";
afterAll(async () => {
  await agent?.stop();
  await ctl?.stop();
  if (root) await rm(root, { recursive: true, force: true });
});

describe("a refused node credential", () => {
  it("is logged with the step that mends it, not as an unreachable controller", async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-refused-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    const nodes = ctl.admin(NodeService);
    const { token: old } = await nodes.registerNode({ nodeId: "refused-1" });
    await nodes.rotateNodeToken({ nodeId: "refused-1" });
    agent = startAgentProcess({
      controller: ctl,
      nodeId: "refused-1",
      token: old,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: `unix://${join(root, "no-engine.sock")}`,
    });
    const line = await waitFor("the agent's credential_refused line", async () =>
      (await readFile(agent!.logFile, "utf8").catch(() => "")).split("\n").find((l) => l.includes('"action":"credential_refused"')),
    );
    const parsed = JSON.parse(line) as { level: string; result: string; message: string };
    expect(parsed.level).toBe("error");
    expect(parsed.result).toBe("UNAUTHENTICATED");
    expect(parsed.message).toContain("refuses node refused-1's token (invalid node token)");
    expect(parsed.message).toContain("/v1/nodes/refused-1/token");
    expect(parsed.message).toContain("--token-file");
    expect(await readFile(agent.logFile, "utf8")).not.toContain('"action":"controller_unreachable"');
  }, 60_000);
});

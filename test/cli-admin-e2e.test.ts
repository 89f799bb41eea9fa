// The CLI's administration commands against the built controller as a process: node register,
// rotate-token, delete; enrollment-token create, list, revoke; deploy (Apply) and order cancel;
// webhook create, list, pause, delete (https:// only), deliveries and redeliver to a receiver; audit verify, list, export; snapshots;
// keys rotate, get; whoami; admin-token rotate (refused, naming why); secret-keys rotate. The
// commands run in-process (cli/program.ts `run`), as the shell runs them, with a config directory
// of their own. With a Docker engine, a real agent shows that `rollout status --wait` after a
// forced deploy waits for the order the deploy made.
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { connect } from "../cli/connection.js";
import { run } from "../cli/program.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { startReceiver } from "./helpers/webhook-receiver.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const IMAGE = "skipper-busybox:local";
const SPARE = `adm-spare-${RUN_ID}`;
const PARKED = `adm-parked-${RUN_ID}`;
const PARKED_TENANT = `adm-parked-${RUN_ID}`;
const LIVE = `adm-live-${RUN_ID}`;
const LIVE_TENANT = `adm-live-${RUN_ID}`;

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

describe("the CLI's administration commands against a controller", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess | undefined;
  let root: string;
  let env: NodeJS.ProcessEnv;

  /** One command line, in-process; resolves with its exit code and output. */
  async function cli(args: string[], input = ""): Promise<Ran> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await run(args, { out: (t) => out.push(t), err: (t) => err.push(t), color: false, env, readStdin: async () => input });
    return { code, stdout: out.join("\n"), stderr: err.join("\n") };
  }
  const show = (r: Ran) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
  const ok = async (args: string[], input = "") => {
    const r = await cli(args, input);
    expect(r.code, `skipper ${args.join(" ")}\n${show(r)}`).toBe(0);
    return r;
  };
  const tenant = (id: string, node: string) =>
    stringify({
      resource_type: "tenant",
      id,
      desired_state: {
        deployment_policy: { target_node_id: node },
        compose: { compose_file: `services:\n  app:\n    image: ${IMAGE}\n    command: ["sleep", "3600"]\n    stop_grace_period: 1s\n` },
      },
    });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-cli-admin-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    env = { XDG_CONFIG_HOME: join(root, "config"), SKIPPER_SERVER: ctl.url, SKIPPER_CA_FILE: ctl.caFile, SKIPPER_TOKEN: E2E_ADMIN_TOKEN };
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, LIVE_TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("node register prints the token once on stdout; rotate-token replaces it; the node is NEVER_SEEN until its agent beats", async () => {
    const reg = await ok(["node", "register", SPARE, "--label", "env=adm", "--display-name", "Spare"]);
    expect(reg.stdout).toMatch(/^\S{20,}$/);
    expect(reg.stderr).toMatch(new RegExp(`Node ${SPARE} registered`));
    const again = await cli(["node", "register", SPARE]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/CONFLICT/);
    const rotated = await ok(["node", "rotate-token", SPARE]);
    expect(rotated.stdout).toMatch(/^\S{20,}$/);
    expect(rotated.stdout).not.toBe(reg.stdout);
    const nodes = await ok(["nodes"]);
    expect(nodes.stdout).toMatch(new RegExp(`^${SPARE}\\s+NEVER_SEEN\\s+env=adm`, "m"));
    // The old token is refused; the new one is the agent's.
    const beat = async (token: string) => {
      const c = connect({ server: ctl.url, caFile: ctl.caFile, token });
      try {
        await c.nodes.heartbeat({ nodeId: SPARE, agentVersion: "test", heartbeatIntervalMs: 60_000n });
        return "ok";
      } catch (e) {
        return (e as Error).message;
      } finally {
        c.close();
      }
    };
    expect(await beat(reg.stdout)).toMatch(/UNAUTHORIZED|unauthenticated|invalid node token/i);
    expect(await beat(rotated.stdout)).toBe("ok");
    expect((await ok(["nodes"])).stdout).toMatch(new RegExp(`^${SPARE}\\s+ONLINE\\s+env=adm`, "m"));
  });

  it("enrollment-token create prints the token once; list shows it active, never its text; revoke ends it", async () => {
    const made = await ok(["enrollment-token", "create", "--node", SPARE, "--uses", "2", "--description", "rack 4"]);
    const token = made.stdout.trim();
    expect(token).toMatch(/^ske_[^_]+_\S+$/);
    const id = token.split("_")[1]!;
    const listed = await ok(["enrollment-token", "list"]);
    expect(listed.stdout).toMatch(new RegExp(`^${id}\\s+active\\s+${SPARE}\\s+2/2\\s+`, "m"));
    expect(listed.stdout).not.toContain(token);
    expect((await ok(["enrollment-token", "revoke", token])).stdout).toBe(`Enrollment token ${id} revoked (revoked).`);
    expect((await ok(["enrollment-token", "list"])).stdout).not.toContain(id);
    const all = await ok(["enrollment-token", "list", "--all", "-o", "json"]);
    expect((JSON.parse(all.stdout) as { id: string; status: string }[]).find((t) => t.id === id)?.status).toBe("revoked");
    const join = await ok(["node", "join-command", SPARE, "--controller", "https://controller.example:8443", "--manual"]);
    expect(join.stdout).toMatch(
      new RegExp(
        `^printf '%s\\\\n' 'ske_\\S+' \\| node skippy\\.mjs install --controller https://controller\\.example:8443 --ca-file ca\\.crt --node-id ${SPARE} --enroll-token-file -$`,
        "m",
      ),
    );
  });

  it("deploy (Apply) makes an order for a tenant's node, and order cancel ends it before any node took it", async () => {
    await ok(["node", "register", PARKED]);
    await ok(["apply", "-f", "-"], tenant(PARKED_TENANT, PARKED));
    const deployed = await ok(["deploy", PARKED_TENANT]);
    const id = new RegExp(`order (\\S+) \\(deploy_service on ${PARKED}\\) (PENDING|RUNNING)$`).exec(deployed.stdout)?.[1];
    expect(id, show(deployed)).toBeDefined();
    const cancelled = await ok(["order", "cancel", id!, "--reason", "cli test"]);
    expect(cancelled.stdout).toBe(`order ${id} (deploy_service on ${PARKED}) cancelled.`);
    const order = (await ctl.admin(WorkOrderService).getWorkOrder({ id: id! })).workOrder!;
    expect(order.status).toBe(WorkOrderStatus.CANCELLED);
    expect(order.cancelRequest?.reason).toBe("cli test");
    const shown = JSON.parse((await ok(["order", "get", id!, "-o", "json"])).stdout) as { status: string };
    expect(shown.status).toBe("WORK_ORDER_STATUS_CANCELLED");
    expect((await cli(["deploy", "no-such-tenant"])).stderr).toMatch(/RESOURCE_NOT_FOUND|not found/i);
  });

  it("node delete removes nodes (the tutorial's leftovers) and leaves their tombstones", async () => {
    await ok(["delete", "-f", "-"], tenant(PARKED_TENANT, PARKED));
    expect((await ok(["node", "delete", PARKED, SPARE])).stdout).toBe(`node/${PARKED} deleted\nnode/${SPARE} deleted`);
    expect((await ok(["nodes"])).stdout).not.toContain(PARKED);
    const tombstones = await ok(["get", "nodes", "--include-deleted", "-o", "json"]);
    expect((JSON.parse(tombstones.stdout) as { id: string }[]).map((n) => n.id)).toEqual(expect.arrayContaining([PARKED, SPARE]));
  });

  it("webhook create takes https:// only, prints the generated secret once; list, pause and delete work on it", async () => {
    const plain = await cli(["webhook", "create", "http://hooks.example.com/x"]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(/the URL must be https:\/\//);
    expect((await ok(["webhook", "list"])).stderr).toBe("No webhooks.");

    const made = await ok(["webhook", "create", "https://127.0.0.1:9/hook/T0k3n", "--event", "deployment.*", "--allow-private-network"]);
    expect(made.stdout).toMatch(/^\S{16,}$/);
    const id = /Webhook (\S+) to 127\.0\.0\.1:9 created for deployment\.\*/.exec(made.stderr)?.[1];
    expect(id, show(made)).toBeDefined();
    const listed = await ok(["webhook", "list"]);
    expect(listed.stdout).toMatch(new RegExp(`^${id}\\s+127\\.0\\.0\\.1:9\\s+deployment\\.\\*\\s+-\\s+-\\s+no\\s+`, "m"));
    expect(listed.stdout + listed.stderr).not.toContain("T0k3n");
    expect((await ok(["webhook", "pause", id!])).stdout).toBe(`Webhook ${id} to 127.0.0.1:9 paused.`);
    expect(JSON.parse((await ok(["webhook", "get", id!, "-o", "json"])).stdout).paused).toBe(true);
    expect((await ok(["webhook", "resume", id!])).stdout).toContain("resumed");
    expect((await ok(["webhook", "deliveries", id!, "--state", "dead_lettered"])).stderr).toMatch(/No deliveries dead_lettered/);
    expect((await ok(["webhook", "delete", id!])).stdout).toBe(`Webhook ${id} deleted.`);
    expect((await ok(["webhook", "list"])).stderr).toBe("No webhooks.");
  });

  it("webhook deliveries lists what a receiver got, and redeliver sends one again", async () => {
    const receiver = await startReceiver();
    try {
      const ca = join(root, "receiver-ca.crt");
      await writeFile(ca, receiver.caPem);
      const made = await ok(["webhook", "create", receiver.url, "--receiver-ca-file", ca, "--allow-private-network"]);
      const id = /Webhook (\S+) to /.exec(made.stderr)![1]!;
      await ok(["node", "register", `adm-hooked-${RUN_ID}`]);
      const delivered = await waitFor(
        "a delivered delivery",
        async () => {
          const r = await ok(["webhook", "deliveries", id, "--state", "delivered", "-o", "json"]);
          return (JSON.parse(r.stdout) as { id: string }[])[0];
        },
        30_000,
      );
      const table = await ok(["webhook", "deliveries", id]);
      expect(table.stdout).toMatch(new RegExp(`^${delivered.id}\\s+\\S+\\s+DELIVERED\\s+1\\s+200\\s+`, "m"));
      const sentTo = () => receiver.received.filter((r) => r.headers["x-skipper-delivery"] === delivered.id).length;
      const before = sentTo();
      expect((await ok(["webhook", "redeliver", id, delivered.id])).stdout).toBe(`Delivery ${delivered.id} queued again (PENDING).`);
      await waitFor("the delivery sent again", async () => (sentTo() > before ? true : undefined), 30_000);
      await ok(["webhook", "delete", id]);
    } finally {
      await receiver.close();
    }
  }, 90_000);

  it("audit verify finds the chain intact; list shows what the commands did; export --dir writes what openssl checks", async () => {
    const verified = await ok(["audit", "verify"]);
    expect(verified.stdout).toMatch(/^intact: \d+ entries \(1\.\.\d+\), head [0-9a-f]{64}$/);
    const listed = await ok(["audit", "list", "--since", "1h", "-o", "json"]);
    const rpcs = (JSON.parse(listed.stdout) as { rpc: string }[]).map((e) => e.rpc);
    expect(rpcs).toEqual(
      expect.arrayContaining([
        "skipper.v1.NodeService/RegisterNode",
        "skipper.v1.WorkOrderService/CancelWorkOrder",
        "skipper.v1.WebhookService/DeleteWebhook",
      ]),
    );
    const dir = join(root, "audit-export");
    const exported = await ok(["audit", "export", "--since", "1h", "--dir", dir]);
    expect(exported.stderr).toMatch(/^Exported \d+ entries, head [0-9a-f]{64} to /);
    expect((await readFile(join(dir, "head.txt"), "utf8")).length).toBe(64);
    expect((await readFile(join(dir, "entries.jsonl"), "utf8")).trim().split("\n").length).toBeGreaterThan(3);
    expect((await stat(join(dir, "head.sig"))).size).toBeGreaterThan(0);
    expect(await readFile(join(dir, "controller.crt"), "utf8")).toMatch(/^-----BEGIN CERTIFICATE-----/);
  });

  it("keys rotate prints the new secret once; whoami names the key; admin-token rotate says where a fixed token is set", async () => {
    const first = (await ok(["keys", "create", "adm-ci", "--role", "viewer"])).stdout.trim();
    const rotated = await ok(["keys", "rotate", "adm-ci", "--grace-period", "1h"]);
    const second = rotated.stdout.trim();
    expect(second).toMatch(/^skk_[^_]+_\S+$/);
    expect(second).not.toBe(first);
    expect(rotated.stderr).toMatch(/API key \S+ \(adm-ci\) rotated: the old secret works 1h more/);
    for (const key of [first, second]) {
      const as = await (async () => {
        const saved = env;
        env = { ...env, SKIPPER_TOKEN: key };
        try {
          return await ok(["whoami"]);
        } finally {
          env = saved;
        }
      })();
      expect(as.stdout).toBe("api key adm-ci, role viewer\ntenants: all");
    }
    expect(JSON.parse((await ok(["keys", "get", "adm-ci", "-o", "json"])).stdout).name).toBe("adm-ci");
    // The e2e controller takes its admin token from SKIPPER_ADMIN_TOKEN: rotating it is refused, naming that.
    const admin = await cli(["admin-token", "rotate"]);
    expect(admin.code, show(admin)).toBe(1);
    expect(admin.stderr).toMatch(/CONFLICT: the admin token is set by SKIPPER_ADMIN_TOKEN/);
    expect(admin.stdout).toBe("");
    expect((await ok(["whoami"])).stdout).toMatch(/^admin token, role admin/);
  });

  it("snapshot system and tenant show the latest snapshot; secret-keys rotate re-seals", async () => {
    const sys = await ok(["snapshot", "system"]);
    expect(sys.stdout).toMatch(/^snapshot \S+ \(system\) taken \S+Z$/m);
    const doc = JSON.parse((await ok(["snapshot", "system", "-o", "json"])).stdout) as { scope: string };
    expect(doc.scope).toBe("system");
    const missing = await cli(["snapshot", "tenant", "no-such-tenant"]);
    expect(missing.code).toBe(1);
    const keys = await ok(["secret-keys", "rotate"]);
    expect(keys.stdout).toMatch(/^Sealing with key \S+: \d+ secret\(s\) and \d+ webhook\(s\) re-sealed/);
  });

  it.skipIf(!dockerHost)(
    "rollout status --wait after a forced deploy waits for the order the deploy made (a real agent)",
    async () => {
      const reg = await ok(["node", "register", LIVE]);
      agent = startAgentProcess({
        controller: ctl,
        nodeId: LIVE,
        token: reg.stdout.trim(),
        stateDir: join(root, "state"),
        workDir: join(root, "work"),
        dockerHost: dockerHost!,
      });
      await ok(["apply", "-f", "-"], tenant(LIVE_TENANT, LIVE));
      expect((await ok(["rollout", "status", LIVE_TENANT, "--wait", "--timeout", "2m"])).stdout).toMatch(/^converged: CONVERGED/m);
      const snap = await ok(["snapshot", "tenant", LIVE_TENANT]);
      expect(snap.stdout).toMatch(new RegExp(`^tenant/${LIVE_TENANT}\\s+yes\\s+[A-Z_]+`, "m"));

      const deployed = await ok(["deploy", LIVE_TENANT]);
      const id = /order (\S+) \(deploy_service/.exec(deployed.stdout)![1]!;
      const status = await ok(["rollout", "status", LIVE_TENANT, "--wait", "--timeout", "2m"]);
      // It saw the order under way, and ended only once the order had.
      expect(status.stdout).toMatch(new RegExp(`^order ${id} deploy_service on ${LIVE} (PENDING|RUNNING)$`, "m"));
      expect(status.stdout).toMatch(/^converged: CONVERGED/m);
      const order = (await ctl.admin(WorkOrderService).getWorkOrder({ id })).workOrder!;
      expect(order.status).toBe(WorkOrderStatus.SUCCESS);

      const waited = await ok(["deploy", LIVE_TENANT, "--wait", "--timeout", "2m"]);
      expect(waited.stdout).toMatch(/^deployed: order \S+ SUCCESS APPLY_OK$/m);
    },
    240_000,
  );
});

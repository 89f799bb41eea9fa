// The `skipper` CLI end to end: the built CLI (dist/cli/main.js, `npm run build` first) run as a
// process, as an operator runs it, against the built controller and a real skippy on the suite's
// Docker engine. It logs in to a context, applies a manifest directory (tenant + service), waits
// for the deploy with `rollout status --wait`, reads it back, applies again (unchanged), rolls out
// a change, explains a tenant no node can take (exit 2), and refuses bad input (exit 1) with a
// message that says what to do. Nothing waits a fixed time: each step waits for what it observes.
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, parseAllDocuments, stringify } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  freePort,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! cli-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const IMAGE = "skipper-busybox:local";
const NODE = "cli-host";
const TENANT = `cli-shop-${RUN_ID}`;
const STRANDED = `cli-stranded-${RUN_ID}`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tenantDoc(port: number, greeting: string): unknown {
  return {
    resource_type: "tenant",
    id: TENANT,
    desired_state: {
      display_name: "CLI shop",
      deployment_policy: { target_node_id: NODE },
      service_ids: ["cli-web"],
      compose: {
        compose_file: [
          "services:",
          "  web:",
          `    image: ${IMAGE}`,
          `    command: ["sh", "-c", "mkdir -p /www && echo \\"$$GREETING\\" > /www/index.html && exec httpd -f -p 8080 -h /www"]`,
          "    environment:",
          `      GREETING: $\{GREETING}`,
          "    ports:",
          `      - "127.0.0.1:$\{WEB_PORT}:8080"`,
          "    stop_grace_period: 1s",
          "",
        ].join("\n"),
        env: { GREETING: greeting, WEB_PORT: String(port) },
      },
    },
    metadata: { labels: { team: "cli" } },
  };
}

const SERVICE_DOC = {
  resource_type: "service",
  id: "cli-web",
  desired_state: { tenant_id: TENANT, kind: "compose_service", image: IMAGE, compose_service: "web" },
  metadata: { labels: { team: "cli", tier: "web" } },
};

describe.skipIf(!dockerHost)("the skipper CLI end to end (built CLI, controller and agent as processes)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let deployDir: string;
  let port: number;
  let env: NodeJS.ProcessEnv;

  /** Runs the built CLI; resolves with its exit code and output. */
  function cli(args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...args], { env: opts.env ?? env, stdio: ["pipe", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(opts.input ?? "");
    });
  }
  const show = (r: Run) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

  async function page(): Promise<string | undefined> {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/`);
      return res.ok ? (await res.text()).trim() : undefined;
    } catch {
      return undefined;
    }
  }

  beforeAll(async () => {
    await removeComposeProject(dockerHost!, TENANT);
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-cli-"));
    deployDir = join(root, "deploy");
    await mkdir(deployDir);
    port = await freePort();
    // A shell of the operator's own: a private config dir, and no Skipper variables of the runner's.
    env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(SKIPPER_|SKIPPY_|NO_COLOR)/.test(k)));
    env.XDG_CONFIG_HOME = join(root, "config");
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE, labels: { env: "cli" } })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
    });
    // The service in one file (YAML), the tenant in another (JSON): apply orders them itself.
    await writeFile(join(deployDir, "a-service.yaml"), stringify(SERVICE_DOC));
    await writeFile(join(deployDir, "b-tenant.json"), JSON.stringify(tenantDoc(port, "hello cli"), null, 2));
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("login checks the token, saves a context with mode 0600 and never prints the token", async () => {
    const refused = await cli(["login", "--server", ctl.url, "--ca-file", ctl.caFile, "--token-stdin"], {
      input: "not-the-token-0123456789\n",
    });
    expect(refused.code, show(refused)).toBe(1);
    expect(refused.stderr).toMatch(/UNAUTHORIZED/);
    expect(refused.stderr).toMatch(/hint: .*skipper login/);

    const r = await cli(["login", "--server", ctl.url, "--ca-file", ctl.caFile, "--token-stdin", "--context", "e2e"], {
      input: `${E2E_ADMIN_TOKEN}\n`,
    });
    expect(r.code, show(r)).toBe(0);
    expect(r.stdout).toMatch(/Logged in to .* as admin token/);
    const file = join(root, "config", "skipper", "config.yaml");
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(parse(await readFile(file, "utf8"))["current-context"]).toBe("e2e");

    const list = await cli(["context", "list"]);
    expect(list.code, show(list)).toBe(0);
    expect(list.stdout).toMatch(/\*\s+e2e\s+https:\/\/127\.0\.0\.1:\d+\s+\S+ca\.crt\s+admin token/);
    for (const out of [r, list]) expect(out.stdout + out.stderr).not.toContain(E2E_ADMIN_TOKEN);
  });

  it("applies a manifest directory (the tenant before its service) and `rollout status --wait` sees it converge", async () => {
    const plan = await cli(["apply", "-f", deployDir, "--dry-run"]);
    expect(plan.code, show(plan)).toBe(0);
    expect(plan.stdout).toMatch(new RegExp(`tenant/${TENANT}: create\\nservice/cli-web: create\\n\\(dry run: nothing was changed\\)`));
    expect((await cli(["get", "tenants"])).stderr).toMatch(/No tenants found/);

    const applied = await cli(["apply", "-f", deployDir]);
    expect(applied.code, show(applied)).toBe(0);
    expect(applied.stdout).toContain("Applied: 2 created, 0 updated, 0 unchanged.");
    expect(applied.stderr).toMatch(new RegExp(`tenant/${TENANT} created\\nservice/cli-web created`));

    const status = await cli(["rollout", "status", TENANT, "--wait", "--timeout", "2m"]);
    expect(status.code, show(status)).toBe(0);
    expect(status.stdout).toMatch(/^converged: CONVERGED/m);
    expect(await page()).toBe("hello cli");
  }, 180_000);

  it("get and describe show the tenant, its service and its node", async () => {
    const tenants = await cli(["get", "tenants"]);
    expect(tenants.code, show(tenants)).toBe(0);
    expect(tenants.stdout).toMatch(/^ID\s+CONVERGENCE\s+NODES\s+AGE$/m);
    expect(tenants.stdout).toMatch(new RegExp(`^${TENANT}\\s+CONVERGED\\s+${NODE}\\s+\\d+[smhd]$`, "m"));

    const wide = await cli(["get", "services", "-o", "wide", "-l", "tier=web"]);
    expect(wide.code, show(wide)).toBe(0);
    expect(wide.stdout).toMatch(new RegExp(`^cli-web\\s+${TENANT}\\s+${IMAGE}\\s+CONVERGED\\s+\\S+\\s+web\\s+`, "m"));
    expect((await cli(["get", "services", "-l", "tier=db"])).stderr).toMatch(/No services found matching tier=db/);

    const json = await cli(["get", "service", "cli-web", "-o", "json"]);
    expect(json.code, show(json)).toBe(0);
    expect(JSON.parse(json.stdout).desired_state.service).toMatchObject({ tenant_id: TENANT, image: IMAGE });
    const yaml = await cli(["get", "tenants", "-o", "yaml"]);
    const docs = parseAllDocuments(yaml.stdout).map((d) => d.toJSON());
    expect(docs.map((d) => d.id)).toEqual([TENANT]);
    expect(docs[0].convergence.status).toBe("CONVERGENCE_STATUS_CONVERGED");

    const nodes = await cli(["nodes"]);
    expect(nodes.stdout).toMatch(new RegExp(`^${NODE}\\s+ONLINE\\s+env=cli\\s+\\S+\\s+\\d+s$`, "m"));

    // Its agent holds a session (skippy's default): the node says so.
    const node = await cli(["describe", "node", NODE]);
    expect(node.code, show(node)).toBe(0);
    expect(node.stdout).toMatch(/^\s+Agent:\s+\S+ \(up \d+s, on a session, beats every \d+(\.\d+)?s\)$/m);

    const described = await cli(["describe", "tenant", TENANT]);
    expect(described.code, show(described)).toBe(0);
    expect(described.stdout).toMatch(/^Convergence:\s+CONVERGED/m);
    expect(described.stdout).toMatch(/^Labels:\s+team=cli$/m);
    expect(described.stdout).toMatch(new RegExp(`^\\s+${NODE}\\s+[0-9a-f]{12}\\s+[0-9a-f]{12}\\s+\\S+\\s+APPLY_OK\\s+CONVERGED$`, "m"));
    expect(described.stdout).toMatch(/resource_created/);

    const orders = await cli(["orders", "--tenant", TENANT, "--status", "success"]);
    expect(orders.stdout).toMatch(new RegExp(`deploy_service\\s+SUCCESS\\s+${TENANT}\\s+${NODE}\\s+APPLY_OK`));
  });

  it("a second apply of the same files says unchanged and writes nothing", async () => {
    const updates = async () =>
      (await ctl.admin(EventService).listEvents({ tenantId: TENANT, type: "resource_updated", pageSize: 1000 })).events.length;
    const before = await updates();
    const again = await cli(["apply", "-f", deployDir]);
    expect(again.code, show(again)).toBe(0);
    expect(again.stdout).toBe(`tenant/${TENANT}: unchanged\nservice/cli-web: unchanged\nNothing to change.\n`);
    expect(await updates()).toBe(before);
  });

  it("a change shows its field diff, rolls out, and `rollout status --wait` follows it to the end", async () => {
    await writeFile(join(deployDir, "b-tenant.json"), JSON.stringify(tenantDoc(port, "hello again"), null, 2));
    const applied = await cli(["apply", "-f", deployDir]);
    expect(applied.code, show(applied)).toBe(0);
    expect(applied.stdout).toContain(
      `tenant/${TENANT}: update\n    ~ desired_state.tenant.compose.env.GREETING: "hello cli" -> "hello again"\n`,
    );
    expect(applied.stdout).toContain("service/cli-web: unchanged");
    const status = await cli(["rollout", "status", TENANT, "-w", "--timeout", "2m"]);
    expect(status.code, show(status)).toBe(0);
    expect(status.stdout).toMatch(/^rollout \S+ (PROGRESSING|SUCCEEDED) \(spec [0-9a-f]{12} -> [0-9a-f]{12}\)/m);
    expect(status.stdout).toMatch(new RegExp(`^  wave \\S+\\s+1/1 done  ${NODE}=DONE$`, "m"));
    expect(status.stdout).toMatch(/^converged: CONVERGED/m);
    expect(await waitFor("the new greeting", async () => ((await page()) === "hello again" ? true : undefined), 30_000)).toBe(true);
    const history = await cli(["rollout", "history", TENANT]);
    expect(history.stdout).toMatch(/^\S+\s+SUCCEEDED\s+[0-9a-f]{8}->[0-9a-f]{8}\s+\S+ 1\/1/m);
    const paused = await cli(["rollout", "pause", TENANT]);
    expect(paused.code, show(paused)).toBe(1);
    expect(paused.stderr).toMatch(/has ended \(SUCCEEDED\): nothing to pause/);
  }, 180_000);

  it("with require_approval, `rollout approve` shows the plan and its hash, and approving that hash lets it roll", async () => {
    const doc = tenantDoc(port, "hello approved") as { desired_state: Record<string, unknown> };
    doc.desired_state.rollout = { require_approval: true };
    await writeFile(join(deployDir, "b-tenant.json"), JSON.stringify(doc, null, 2));
    const applied = await cli(["apply", "-f", deployDir]);
    expect(applied.code, show(applied)).toBe(0);
    // The rollout waits: status says blocked (2) without --wait.
    const shown = await waitFor(
      "the plan to wait for approval",
      async () => {
        const r = await cli(["rollout", "approve", TENANT]);
        return r.code === 0 && /^plan [0-9a-f]+$/m.test(r.stdout) ? r : undefined;
      },
      60_000,
    );
    expect(shown.stdout).toMatch(new RegExp(`^node ${NODE} \\(wave \\S+\\): [0-9a-f]{12} -> [0-9a-f]{12}$`, "m"));
    const hash = /^plan ([0-9a-f]+)$/m.exec(shown.stdout)![1]!;
    const wrong = await cli(["rollout", "approve", TENANT, "--plan", "0".repeat(hash.length)]);
    expect(wrong.code, show(wrong)).toBe(1);
    const ok = await cli(["rollout", "approve", TENANT, "--plan", hash, "--reason", "reviewed"]);
    expect(ok.code, show(ok)).toBe(0);
    const status = await cli(["rollout", "status", TENANT, "-w", "--timeout", "2m"]);
    expect(status.code, show(status)).toBe(0);
    expect(await waitFor("the approved greeting", async () => ((await page()) === "hello approved" ? true : undefined), 30_000)).toBe(true);
    // Back to no approval, for the tests after this one.
    await writeFile(join(deployDir, "b-tenant.json"), JSON.stringify(tenantDoc(port, "hello approved"), null, 2));
    expect((await cli(["apply", "-f", deployDir])).code).toBe(0);
  }, 240_000);

  it("a tenant no node can take: rollout status exits 2 and explain prints the blocker", async () => {
    const doc = {
      resource_type: "tenant",
      id: STRANDED,
      desired_state: {
        deployment_policy: { node_selector: { env: "nowhere" } },
        compose: { compose_file: `services:\n  app:\n    image: ${IMAGE}\n` },
      },
    };
    const r = await cli(["apply", "-f", "-"], { input: stringify(doc) });
    expect(r.code, show(r)).toBe(0);
    const status = await cli(["rollout", "status", STRANDED, "--wait", "--timeout", "1m"]);
    expect(status.code, show(status)).toBe(2);
    expect(status.stdout).toMatch(/^blocked: NO_MATCHING_NODE/m);
    expect(status.stderr).toMatch(/hint: see why with `skipper explain tenant/);

    const explained = await cli(["explain", STRANDED]);
    expect(explained.code, show(explained)).toBe(2);
    expect(explained.stdout).toMatch(new RegExp(`^tenant/${STRANDED}\\s+NO_MATCHING_NODE$`, "m"));
    expect(explained.stdout).toMatch(/^└─ verdict: NO_MATCHING_NODE: .* <- blocking$/m);
    expect(explained.stdout).not.toContain("\u001b["); // no colour when stdout is not a terminal

    const fine = await cli(["explain", "tenant", TENANT]);
    expect(fine.code, show(fine)).toBe(0);
    expect(fine.stdout).toMatch(new RegExp(`├─ node ${NODE}\\n│  ├─ order: deploy_service order`));
    expect(fine.stdout).not.toContain("<- blocking");
  }, 120_000);

  it("bad input exits 1 with a message that says what to do, and changes nothing", async () => {
    const bad = join(root, "bad.yaml");
    await writeFile(bad, stringify({ resource_type: "service", id: "typo", desired_state: { tenant_id: TENANT, imag: "x" } }));
    const r = await cli(["apply", "-f", bad]);
    expect(r.code, show(r)).toBe(1);
    expect(r.stderr).toMatch(/^error: .*bad\.yaml: not a valid service: .*key "imag" is unknown/m);

    const noId = await cli(["apply", "-f", "-"], { input: "resource_type: tenant\ndesired_state: {}\n" });
    expect(noId.code).toBe(1);
    expect(noId.stderr).toMatch(/stdin: id is missing\nhint: 1-128 characters/);

    // Refused by the controller: the resource and its source are named, and what was written before it.
    const orphan = await cli(["apply", "-f", "-"], {
      input: stringify({ resource_type: "service", id: "orphan", desired_state: { tenant_id: "no-such-tenant", image: IMAGE } }),
    });
    expect(orphan.code, show(orphan)).toBe(1);
    expect(orphan.stderr).toMatch(/^error: service\/orphan \(stdin\): [A-Z_]+: .*no-such-tenant/m);
    expect(orphan.stderr).toMatch(/^hint: nothing was written$/m);

    const type = await cli(["get", "pods"]);
    expect(type.code).toBe(1);
    expect(type.stderr).toMatch(/unknown resource type "pods"\nhint: one of: tenant, node/);

    const usage = await cli(["rollout", "status"]);
    expect(usage.code).toBe(1);
    expect(usage.stderr).toMatch(/missing required argument 'tenant'/);

    const down = await cli(["get", "tenants", "--server", `https://127.0.0.1:${await freePort()}`]);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/ECONNREFUSED[\s\S]*hint: is the controller running at/);

    const untrusted = await cli(["get", "tenants", "--ca-file", join(root, "missing-ca.crt")]);
    expect(untrusted.code).toBe(1);
    expect(untrusted.stderr).toMatch(/cannot read the CA file .*missing-ca\.crt[\s\S]*hint: pass --ca-file/);

    expect((await cli(["get", "service", "typo"])).stderr).toMatch(/RESOURCE_NOT_FOUND/);
  });

  it("API keys: created once on stdout, usable, revoked; an enrollment token likewise", async () => {
    const created = await cli(["keys", "create", "cli-ci", "--role", "viewer", "--tenant", TENANT]);
    expect(created.code, show(created)).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^skk_[^_]+_\S+$/);
    expect(created.stderr).toMatch(/API key \S+ \(cli-ci, viewer, tenants .*\) created/);
    const asKey = { ...env, SKIPPER_TOKEN: key };
    const seen = await cli(["get", "tenants"], { env: asKey });
    expect(seen.stdout).toContain(TENANT);
    expect(seen.stdout).not.toContain(STRANDED);
    const listed = await cli(["keys", "list"]);
    expect(listed.stdout).toMatch(/cli-ci\s+viewer\s+tenants \S+\s+active/);
    expect(listed.stdout).not.toContain(key);
    expect((await cli(["keys", "revoke", "cli-ci", "--reason", "test"])).stdout).toMatch(/revoked/);
    const refused = await cli(["get", "tenants"], { env: asKey });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/UNAUTHORIZED[\s\S]*hint:/);

    const enroll = await cli(["node", "enroll-token", "cli-host-2", "--label", "env=cli"]);
    expect(enroll.code, show(enroll)).toBe(0);
    expect(enroll.stdout.trim()).toMatch(/^ske_\S+$/);
  });

  it("events --follow prints an event as it is recorded", async () => {
    const child = spawn(
      process.execPath,
      [CLI, "events", "--follow", "--tenant", TENANT, "--type", "desired_state_changed", "--since", "1s"],
      {
        env,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (out += d.toString("utf8")));
    try {
      // The header comes once the events so far are listed; from then on, new ones stream.
      await waitFor("the header", async () => (/^TIME\s+TYPE/m.test(out) ? true : undefined), 20_000, 50);
      const before = out.split("\n").filter((l) => l.includes("desired_state_changed")).length;
      await writeFile(join(deployDir, "b-tenant.json"), JSON.stringify(tenantDoc(port, "hello follow"), null, 2));
      const applied = await cli(["apply", "-f", deployDir]);
      expect(applied.code, show(applied)).toBe(0);
      await waitFor(
        "the followed event",
        async () => (out.split("\n").filter((l) => l.includes("desired_state_changed")).length > before ? true : undefined),
        20_000,
        50,
      );
      expect(out).toMatch(new RegExp(`^\\S+Z\\s+desired_state_changed\\s+tenant/${TENANT}\\s+-\\s+admin\\s+`, "m"));
    } finally {
      child.kill("SIGTERM");
    }
  }, 60_000);

  it("orders lists the newest first, as it says: --limit keeps the latest", async () => {
    // Oldest first from the API, every page: the tenant's orders as they were made.
    const all = async () => {
      const ids: string[] = [];
      let pageToken = "";
      do {
        const page = await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: TENANT, pageSize: 1, pageToken });
        ids.push(...page.workOrders.map((o) => o.id));
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      return ids;
    };
    // Asked again if an order was made while the command ran.
    for (let attempt = 1; ; attempt++) {
      const before = await all();
      const r = await cli(["orders", "--tenant", TENANT, "--limit", "2", "-o", "json"]);
      const after = await all();
      if (before.join() !== after.join() && attempt < 5) continue;
      expect(after.length).toBeGreaterThanOrEqual(3);
      expect(r.code, show(r)).toBe(0);
      expect((JSON.parse(r.stdout) as { id: string }[]).map((o) => o.id)).toEqual(after.slice(-2).reverse());
      break;
    }
  });

  it("events lists what happened, filtered as the API filters", async () => {
    const r = await cli(["events", "--tenant", TENANT, "--type", "desired_state_changed", "-o", "json"]);
    expect(r.code, show(r)).toBe(0);
    const events = JSON.parse(r.stdout) as { type: string; resource_id: string }[];
    expect(events.length).toBeGreaterThanOrEqual(1);
    expect(new Set(events.map((e) => e.type))).toEqual(new Set(["desired_state_changed"]));
    // --limit keeps the newest, printed oldest first: the last two of the whole listing (asked
    // again if an event was recorded while the command ran).
    const all = async () => (await ctl.admin(EventService).listEvents({ tenantId: TENANT, pageSize: 1000 })).events.map((e) => e.id);
    for (let attempt = 1; ; attempt++) {
      const before = await all();
      const two = await cli(["events", "--tenant", TENANT, "--since", "1h", "--limit", "2", "-o", "json"]);
      const after = await all();
      if (before.join() !== after.join() && attempt < 5) continue;
      expect(two.code, show(two)).toBe(0);
      expect((JSON.parse(two.stdout) as { id: string }[]).map((e) => e.id)).toEqual(after.slice(-2));
      break;
    }
  });

  it("delete -f removes the service, then the tenant, and the project comes down", async () => {
    const r = await cli(["delete", "-f", deployDir]);
    expect(r.code, show(r)).toBe(0);
    expect(r.stdout).toBe(`service/cli-web deleted\ntenant/${TENANT} deleted\n`);
    await waitFor("the web to stop answering", async () => ((await page()) === undefined ? true : undefined), 60_000);
    expect((await cli(["delete", "-f", deployDir])).stdout).toMatch(/not found \(nothing to delete\)/);
  }, 90_000);
});

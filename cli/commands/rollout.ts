// `skipper rollout`: follow a tenant's change to its nodes (status, with --wait until it is done
// or blocked: exit 0 or 2, Nomad's convention) and steer its rollout (pause, resume, promote,
// abort), read its history. Status is polled once a second: the API has no stream of resource
// changes.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { RolloutNodeState, RolloutSchema, RolloutStatus, type Rollout, type RolloutPlan } from "../../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../../gen/skipper/v1/rollout_service_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { Clients } from "../connection.js";
import { CliError, EXIT_BLOCKED } from "../errors.js";
import { paint } from "../io.js";
import { actorLine } from "../rollout-actor.js";
import { asJson, cut, documents, enumName, outputFormat, table, when } from "../output.js";
import { waveSummary } from "../resource-columns.js";
import { CHANGING_ORDERS, UNFINISHED_ORDER_STATUSES, orderText, rolloutVerdict, statusLines, type Verdict } from "../rollout-verdict.js";
import type { CommandContext } from "../command-context.js";
import { durationFlag } from "../flags.js";

const ENDED = new Set([RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.ROLLED_BACK, RolloutStatus.SUPERSEDED]);

/** `skipper rollout` and its commands. */
export function registerRollout(program: Command, ctx: CommandContext): void {
  const rollout = program.command("rollout").description("follow and steer a tenant's rollouts");
  registerStatus(rollout, ctx);
  registerSteering(rollout, ctx);
  registerPromote(rollout, ctx);
  registerApprove(rollout, ctx);
  registerHistory(rollout, ctx);
  registerPlanAndGet(rollout, ctx);
}

// `rollout status [--wait]`: where the latest change stands, printed as it changes.
function registerStatus(rollout: Command, ctx: CommandContext): void {
  calls(
    rollout.command("status"),
    ResourceService.method.getResource,
    RolloutService.method.listRollouts,
    WorkOrderService.method.listWorkOrders,
  )
    .argument("<tenant>", "the tenant")
    .description("where the tenant's latest change stands: convergence, its rollout and each wave")
    .option("-w, --wait", "wait until it is converged (exit 0) or blocked (exit 2), printing each change")
    .option("--timeout <duration>", "with --wait: give up after this long (exit 1)", "10m")
    .option("--interval <duration>", "with --wait: how often to look", "1s")
    .addHelpText(
      "after",
      `
Exit codes: 0 converged (its rollout complete); 2 blocked: paused, waiting for a promote or an
approval, failed, rolled back, or nowhere to run (no matching node, disabled or offline node, a
missing reference); 1 an error, or --timeout passed. Without --wait a change still under way
exits 0 after printing where it is. While a deploy, remove or rollback order of the tenant is
unfinished (a \`skipper deploy\`'s too), the change is under way, whatever the tenant's
convergence says until the order ends.

Examples:
  $ skipper rollout status example-tenant
  $ skipper apply -f deploy/ && skipper rollout status shop --wait --timeout 5m`,
    )
    .action(async (tenantId: string, opts: { wait?: boolean; timeout: string; interval: string }) => {
      const timeoutMs = durationFlag(opts.timeout, "--timeout", 1);
      const intervalMs = durationFlag(opts.interval, "--interval", 100);
      const clients = ctx.clients();
      const shown = new Map<string, string>();
      const show = ({ tenant, rollout: r, inFlight }: State) => {
        for (const l of [...statusLines(tenant, r), ...inFlight.map((o) => ({ key: o.id, text: orderText(o) }))]) {
          if (shown.get(l.key) === l.text) continue;
          shown.set(l.key, l.text);
          ctx.io.out(l.text);
        }
      };
      const deadline = Date.now() + timeoutMs;
      let unreachable = false;
      for (;;) {
        let state: State | undefined;
        try {
          state = await readState(clients, tenantId);
          unreachable = false;
        } catch (e) {
          // A controller restarting mid-wait: keep looking until the deadline.
          if (!opts.wait || !(e instanceof ConnectError) || e.code !== Code.Unavailable) throw e;
          if (!unreachable) ctx.io.err(`controller unreachable (${e.rawMessage}); still trying`);
          unreachable = true;
        }
        if (state) {
          show(state);
          const v = rolloutVerdict(state.tenant, state.rollout, state.inFlight);
          if (v.state !== "progressing" || !opts.wait) return finish(ctx, v);
        }
        if (Date.now() + intervalMs > deadline) {
          throw new CliError(`timed out after ${opts.timeout}: tenant ${tenantId} is not converged yet`, {
            hint: `see why with \`skipper explain ${tenantId}\`, or wait longer with --timeout`,
          });
        }
        await new Promise((r) => setTimeout(r, intervalMs));
      }
    });
}

// `rollout pause|resume|abort`: steer the rollout under way.
function registerSteering(rollout: Command, ctx: CommandContext): void {
  const steer = (name: "pause" | "resume" | "abort", what: string, example: string) =>
    calls(
      rollout.command(name),
      ResourceService.method.getResource,
      RolloutService.method.listRollouts,
      name === "pause"
        ? RolloutService.method.pauseRollout
        : name === "resume"
          ? RolloutService.method.resumeRollout
          : RolloutService.method.abortRollout,
    )
      .argument("<tenant>", "the tenant whose rollout under way to act on")
      .description(what)
      .option("--reason <text>", "why, recorded with who did it")
      .addHelpText("after", `\nExample:\n  $ ${example}`)
      .action(async (tenantId: string, opts: { reason?: string }) => {
        const clients = ctx.clients();
        const current = await rolloutUnderWay(clients, tenantId, name);
        const req = { id: current.id, reason: opts.reason ?? "" };
        const res =
          name === "pause"
            ? await clients.rollouts.pauseRollout(req)
            : name === "resume"
              ? await clients.rollouts.resumeRollout(req)
              : await clients.rollouts.abortRollout(req);
        printRollout(ctx, res.rollout!);
      });
  steer(
    "pause",
    "start no further node of the tenant's rollout; nodes already deploying finish",
    'skipper rollout pause shop --reason "error rate up"',
  );
  steer("resume", "go on with a paused rollout (failures before the resume no longer count)", "skipper rollout resume shop");
  steer("abort", "return every node the rollout updated to the spec it ran before", 'skipper rollout abort shop --reason "wrong build"');
}

// `rollout promote`: open the next promote gate.
function registerPromote(rollout: Command, ctx: CommandContext): void {
  calls(
    rollout.command("promote"),
    ResourceService.method.getResource,
    RolloutService.method.listRollouts,
    RolloutService.method.promoteRollout,
  )
    .argument("<tenant>", "the tenant whose rollout waits for a promote")
    .description("open the promote gate of the next wave that has one")
    .option("--wave <name>", "the wave to open (makes a retried promote harmless)")
    .option("--reason <text>", "why, recorded with who did it")
    .addHelpText(
      "after",
      '\nExamples:\n  $ skipper rollout promote shop\n  $ skipper rollout promote shop --wave half --reason "canary is fine"',
    )
    .action(async (tenantId: string, opts: { wave?: string; reason?: string }) => {
      const clients = ctx.clients();
      const current = await rolloutUnderWay(clients, tenantId, "promote");
      const res = await clients.rollouts.promoteRollout({ id: current.id, wave: opts.wave ?? "", reason: opts.reason ?? "" });
      printRollout(ctx, res.rollout!);
    });
}

// `rollout approve`: show a rollout's plan, or approve it by its hash.
function registerApprove(rollout: Command, ctx: CommandContext): void {
  calls(
    rollout.command("approve"),
    ResourceService.method.getResource,
    RolloutService.method.listRollouts,
    RolloutService.method.approveRollout,
  )
    .argument("<tenant>", "the tenant whose rollout waits for approval")
    .description("approve a rollout's plan; without --plan, show the plan (per node: waves, compose diff, env keys) and its hash")
    .option("--plan <hash>", "the plan hash you reviewed (refused if the plan changed since)")
    .option("--reason <text>", "why, recorded with who did it")
    .addHelpText(
      "after",
      '\nExamples:\n  $ skipper rollout approve shop                 # shows the plan and its hash\n  $ skipper rollout approve shop --plan 3f9c0a1b2c4d --reason "reviewed"',
    )
    .action(async (tenantId: string, opts: { plan?: string; reason?: string }) => {
      const clients = ctx.clients();
      const current = await rolloutUnderWay(clients, tenantId, "approve");
      const plan = current.plan;
      if (!opts.plan) {
        if (!plan || plan.planHash === "") {
          throw new CliError(`rollout ${current.id} is ${enumName(RolloutStatus, current.status)}: it has no plan waiting for approval`);
        }
        printPlan(ctx, plan);
        ctx.io.err(`Approve it with: skipper rollout approve ${tenantId} --plan ${plan.planHash}`);
        return;
      }
      const res = await clients.rollouts.approveRollout({ id: current.id, planHash: opts.plan, reason: opts.reason ?? "" });
      printRollout(ctx, res.rollout!);
    });
}

// `rollout history`: the tenant's rollouts, newest first.
function registerHistory(rollout: Command, ctx: CommandContext): void {
  calls(rollout.command("history"), RolloutService.method.listRollouts)
    .argument("<tenant>", "the tenant")
    .description("the tenant's rollouts, newest first")
    .option("--limit <n>", "at most this many", "20")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper rollout history shop\n  $ skipper rollout history shop -o yaml --limit 1")
    .action(async (tenantId: string, opts: { limit: string; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const limit = Number(opts.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new CliError("--limit must be a whole number from 1 to 1000");
      const res = await ctx.clients().rollouts.listRollouts({ tenantId, pageSize: limit });
      if (format !== "table") {
        ctx.io.out(
          documents(
            format,
            res.rollouts.map((r) => asJson(RolloutSchema, r)),
            true,
          ),
        );
        return;
      }
      if (res.rollouts.length === 0) {
        ctx.io.err(`Tenant ${tenantId} has had no rollout (a first deploy to a node needs none).`);
        return;
      }
      ctx.io.out(
        table(
          ["ID", "STATUS", "SPEC", "WAVES", "STARTED", "BY", "FINISHED", "MESSAGE"],
          res.rollouts.map((r) => [
            r.id,
            enumName(RolloutStatus, r.status),
            `${r.fromSpecHash.slice(0, 8) || "-"}->${r.toSpecHash.slice(0, 8)}`,
            waveSummary(r.waves),
            when(r.createdAt),
            r.started?.actor || "-",
            when(r.finishedAt),
            cut(r.message, 50),
          ]),
        ),
      );
    });
}

// `rollout plan` (a dry run of the tenant's desired state) and `rollout get ID`.
function registerPlanAndGet(rollout: Command, ctx: CommandContext): void {
  calls(rollout.command("plan"), RolloutService.method.planRollout)
    .argument("<tenant>", "the tenant")
    .description("what a rollout of the tenant's desired state would change now, per node (compose diff, env keys), and its plan hash")
    .addHelpText("after", "\nExample:\n  $ skipper rollout plan shop")
    .action(async (tenantId: string) => {
      const plan = (await ctx.clients().rollouts.planRollout({ tenantId })).plan;
      if (!plan || plan.nodes.length === 0) {
        ctx.io.out(`tenant ${tenantId}: nothing to roll out (every node runs its desired state, or none is placed)`);
        return;
      }
      printPlan(ctx, plan);
    });
  calls(rollout.command("get"), RolloutService.method.getRollout)
    .argument("<id>", "the rollout's id (skipper rollout history TENANT lists them)")
    .description("one rollout: its waves, nodes, plan and who steered it")
    .option("-o, --output <format>", "yaml or json", "yaml")
    .addHelpText("after", "\nExample:\n  $ skipper rollout get 0193f7c2-...")
    .action(async (id: string, opts: { output: string }) => {
      const format = outputFormat(opts.output, ["json", "yaml"]);
      ctx.io.out(documents(format, [asJson(RolloutSchema, (await ctx.clients().rollouts.getRollout({ id })).rollout!)], false));
    });
}

function printPlan(ctx: CommandContext, plan: RolloutPlan): void {
  for (const n of plan.nodes) {
    ctx.io.out(`node ${n.nodeId} (wave ${n.wave || "-"}): ${n.fromSpecHash.slice(0, 12) || "nothing"} -> ${n.toSpecHash.slice(0, 12)}`);
    if (n.envChanged.length > 0) ctx.io.out(`  env keys added or removed: ${n.envChanged.join(", ")}`);
    if (n.composeDiff) ctx.io.out(n.composeDiff.replace(/^/gm, "  "));
  }
  ctx.io.out(`plan ${plan.planHash}`);
}

function finish(ctx: CommandContext, v: Verdict): void {
  if (v.state === "done") ctx.io.out(paint(ctx.io, "green", `converged: ${v.reason}`));
  else if (v.state === "progressing") ctx.io.out(`in progress: ${v.reason}`);
  else {
    ctx.io.out(paint(ctx.io, "red", `blocked: ${v.reason}`));
    if (v.hint) ctx.io.err(`hint: ${v.hint}`);
    ctx.exitCode = EXIT_BLOCKED;
  }
}

interface State {
  tenant: Resource;
  rollout: Rollout | undefined;
  /** The tenant's unfinished orders that change what it runs (an Apply's among them). */
  inFlight: WorkOrder[];
}

async function readState(clients: Clients, tenantId: string): Promise<State> {
  // The orders first: one that ends between the two reads is then seen in the tenant's convergence.
  const inFlight = (
    await Promise.all(
      UNFINISHED_ORDER_STATUSES.map((status) => clients.orders.listWorkOrders({ tenantId, status, pageSize: 100, newestFirst: true })),
    )
  ).flatMap((r) => r.workOrders.filter((o) => CHANGING_ORDERS.has(o.type)));
  const [t, r] = await Promise.all([
    clients.resources.getResource({ resourceType: "tenant", id: tenantId }),
    clients.rollouts.listRollouts({ tenantId, pageSize: 1 }),
  ]);
  return { tenant: t.resource!, rollout: r.rollouts[0], inFlight };
}

async function rolloutUnderWay(clients: Clients, tenantId: string, verb: string): Promise<Rollout> {
  // The tenant first: a mistyped id says so, not "no rollout".
  await clients.resources.getResource({ resourceType: "tenant", id: tenantId });
  const latest = (await clients.rollouts.listRollouts({ tenantId, pageSize: 1 })).rollouts[0];
  if (!latest) {
    throw new CliError(`tenant ${tenantId} has no rollout to ${verb}`, {
      hint: "a rollout starts when a change of the tenant reaches nodes that run an older spec",
    });
  }
  if (ENDED.has(latest.status)) {
    throw new CliError(
      `the latest rollout of ${tenantId}, ${latest.id}, has ended (${enumName(RolloutStatus, latest.status)}): nothing to ${verb}`,
      {
        hint: `see it with \`skipper rollout history ${tenantId}\``,
      },
    );
  }
  return latest;
}

function printRollout(ctx: CommandContext, r: Rollout): void {
  ctx.io.out(`rollout ${r.id} ${enumName(RolloutStatus, r.status)}${r.message ? `: ${r.message}` : ""}`);
  for (const [what, a] of [
    ["paused", r.paused],
    ["resumed", r.resumed],
    ["aborted", r.aborted],
  ] as const) {
    if (a) ctx.io.out(`  ${actorLine(what, a)}`);
  }
  for (const w of r.waves) {
    ctx.io.out(
      `  wave ${w.name}: ${w.nodes.map((n) => `${n.nodeId}=${enumName(RolloutNodeState, n.state)}`).join(" ")}${w.promoted ? ` (${actorLine("promoted", w.promoted)})` : ""}`,
    );
  }
}

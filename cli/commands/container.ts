// `skipper container deploy|rollback|remove NODE ...`: single containers outside Compose, one per
// name on a node, pinned by digest (deploy_container and control_container orders; the node's
// agent pulls, verifies the digest, stops the old container and keeps it as NAME-previous until
// the new one is up, and renames it back when the new one does not come up).
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { ContainerOperation, type ContainerDeployment } from "../../gen/skipper/v1/order_action_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { CreateWorkOrderRequestSchema } from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";
import { collect, durationFlag, labelFlags } from "../flags.js";
import { nodeSilence, runOrder } from "../order-wait.js";

interface DeployOpts {
  name: string;
  image: string;
  digest?: string;
  env: string[];
  publish: string[];
  mount: string[];
  label: string[];
  restart?: string;
  healthCmd?: string;
  readyTimeout: string;
  settle: string;
  keepPrevious?: boolean;
  stopTimeout: string;
  claimTimeout: string;
}

/** `skipper container ...`. */
export function registerContainer(program: Command, ctx: CommandContext): void {
  const container = program.command("container").description("single containers outside Compose, pinned by digest, on one node");
  const rpcs = [
    ResourceService.method.getResource,
    WorkOrderService.method.createWorkOrder,
    WorkOrderService.method.getWorkOrder,
    WorkOrderService.method.cancelWorkOrder,
  ] as const;
  calls(container.command("deploy"), ...rpcs)
    .argument("<node>", "the node to run it on")
    .argument("[args...]", "the container's command and arguments, replacing the image's (after --)")
    .description("run a container on a node, or update it to a new image: the old one is kept until the new one is up")
    .requiredOption("--name <name>", "the container's name on the node")
    .requiredOption("--image <ref>", "image reference, repo[:tag][@sha256:...]")
    .option(
      "--digest <sha256:...>",
      "the digest the image must have (repo digest or image id); default: the reference's, else the tag's now",
    )
    .option("-e, --env <KEY=VALUE|KEY>", "a variable; KEY alone takes its value from this shell; repeat for several", collect, [])
    .option("-p, --publish <[ip:]host:container[/udp]>", "publish a port; repeat for several", collect, [])
    .option("--mount <volume|./dir:/path[:ro]>", "a named volume, or a directory under the agent's own, at /path; repeat", collect, [])
    .option("--label <key=value>", "a label of the container; repeat for several", collect, [])
    .option("--restart <policy>", "no, always, unless-stopped (default), on-failure[:N]")
    .option("--health-cmd <command>", "a shell command the engine runs in the container as its healthcheck")
    .option("--ready-timeout <duration>", "how long the new container has to come up", "60s")
    .option("--settle <duration>", "without a healthcheck: how long it must keep running", "3s")
    .option("--keep-previous", "keep the replaced container (stopped) for `skipper container rollback`")
    .option("--stop-timeout <seconds>", "seconds the old container has to stop before it is killed", "10")
    .option("--claim-timeout <duration>", "cancel the order if the node has not taken it within this", "60s")
    .addHelpText(
      "after",
      `
The update is stop-first: the old container stops (freeing its ports), is renamed NAME-previous,
and the new one starts; when the new one is not up in time (its healthcheck, or running past the
settle time) it is removed and the old one runs again (ROLLED_BACK). A digest that does not match
is refused before anything changes (DIGEST_MISMATCH). Needs the operator role.

Examples:
  $ skipper container deploy host-1 --name web --image registry.example/web:1.4 \\
      --digest sha256:4b1f... -p 8080:80 -e API_TOKEN --keep-previous
  $ skipper container rollback host-1 web`,
    )
    .action(async (node: string, args: string[], opts: DeployOpts) => {
      const spec = {
        name: opts.name,
        image: opts.image,
        digest: opts.digest ?? "",
        args,
        env: envFlags(opts.env),
        ports: opts.publish.map(portFlag),
        mounts: opts.mount.map(mountFlag),
        labels: labelFlags(opts.label),
        restartPolicy: opts.restart ?? "",
        healthCommand: opts.healthCmd ?? "",
        readyTimeout: durationFromMs(durationFlag(opts.readyTimeout, "--ready-timeout")),
        settle: durationFromMs(durationFlag(opts.settle, "--settle", 0)),
        keepPrevious: opts.keepPrevious === true,
        stopTimeoutSeconds: Number(opts.stopTimeout),
      };
      const order = await run(ctx, node, opts.claimTimeout, {
        type: WorkOrderType.DEPLOY_CONTAINER,
        target: { nodeId: node },
        action: { kind: { case: "deployContainer", value: { spec } } },
        // An engine that did not answer is retried; every other failure says why at once.
        maxAttempts: 3,
      });
      report(ctx, order, "CONTAINER_OK");
    });
  for (const [verb, operation, ok, what] of [
    ["rollback", ContainerOperation.ROLLBACK, "ROLLBACK_OK", "run the kept NAME-previous again (run twice: roll forward)"],
    ["remove", ContainerOperation.REMOVE, "REMOVE_OK", "stop and remove the container and the one kept beside it"],
  ] as const) {
    calls(container.command(verb), ...rpcs)
      .argument("<node>", "the node it runs on")
      .argument("<name>", "the container's name")
      .description(what)
      .option("--claim-timeout <duration>", "cancel the order if the node has not taken it within this", "60s")
      .action(async (node: string, name: string, opts: { claimTimeout: string }) => {
        const order = await run(ctx, node, opts.claimTimeout, {
          type: WorkOrderType.CONTROL_CONTAINER,
          target: { nodeId: node },
          action: { kind: { case: "controlContainer", value: { name, operation } } },
        });
        report(ctx, order, ok);
      });
  }
}

async function run(
  ctx: CommandContext,
  node: string,
  claimTimeout: string,
  req: MessageInitShape<typeof CreateWorkOrderRequestSchema>,
): Promise<WorkOrder> {
  const claimWithinMs = durationFlag(claimTimeout, "--claim-timeout");
  const clients = ctx.clients();
  const silence = await nodeSilence(clients, node);
  if (silence) throw new CliError(`${node} is ${silence}: it cannot take the order now`, { hint: `skipper get node ${node}` });
  const { order, untaken } = await runOrder(clients, req, claimWithinMs);
  if (untaken) throw new CliError(`${node}: ${untaken}`, { hint: `skipper get node ${node}` });
  return order;
}

function report(ctx: CommandContext, order: WorkOrder, ok: string): void {
  const r = order.result;
  const c = r?.details?.container;
  if (r?.code === ok) {
    ctx.io.out(r.message);
    if (c) ctx.io.out(describe(c));
    return;
  }
  throw new CliError(`${r?.code ?? WorkOrderStatus[order.status]}: ${r?.message ?? "no result"}`, {
    hint: r?.code === "NO_PREVIOUS" ? "deploy with --keep-previous to keep the replaced container for a rollback" : undefined,
  });
}

function describe(c: ContainerDeployment): string {
  const id = (s: string) => s.replace(/^sha256:/, "").slice(0, 12);
  const now = c.containerId ? `container ${id(c.containerId)} ${c.image} ${c.digest}` : "no container";
  const kept = c.previousKept ? `; kept: ${c.name}-previous ${id(c.previousContainerId)} ${c.previousDigest}` : "";
  return `${c.name}: ${now}${kept}`;
}

/** `--env KEY=VALUE` or `--env KEY` (the value from this shell's environment, kept off the command line). */
function envFlags(flags: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const f of flags) {
    const eq = f.indexOf("=");
    if (eq === 0) throw new CliError(`--env ${JSON.stringify(f)} must be KEY=VALUE or KEY`);
    if (eq > 0) env[f.slice(0, eq)] = f.slice(eq + 1);
    else if (process.env[f] !== undefined) env[f] = process.env[f];
    else throw new CliError(`--env ${f}: no variable ${f} in this shell's environment`);
  }
  return env;
}

function portFlag(text: string): { hostIp: string; hostPort: number; containerPort: number; protocol: string } {
  const m = /^(?:(\[[0-9a-fA-F:]+\]|[0-9.]+):)?(?:(\d+):)?(\d+)(?:\/(tcp|udp))?$/.exec(text);
  if (!m) throw new CliError(`--publish ${JSON.stringify(text)} must be [ip:][host:]container[/tcp|udp]`);
  return { hostIp: (m[1] ?? "").replace(/^\[|\]$/g, ""), hostPort: Number(m[2] ?? 0), containerPort: Number(m[3]), protocol: m[4] ?? "" };
}

function mountFlag(text: string): { source: string; target: string; readOnly: boolean } {
  const parts = text.split(":");
  if (parts.length < 2 || parts.length > 3 || (parts[2] !== undefined && parts[2] !== "ro"))
    throw new CliError(`--mount ${JSON.stringify(text)} must be SOURCE:/path or SOURCE:/path:ro`);
  return { source: parts[0]!, target: parts[1]!, readOnly: parts[2] === "ro" };
}

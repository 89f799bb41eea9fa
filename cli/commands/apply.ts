// `skipper apply -f` and `skipper delete -f`: manifests in (manifests.ts), the plan shown, then
// the writes (apply.ts). Deletion goes in the reverse order of creation (services before their
// tenant).
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { calls } from "../command-rpcs.js";
import { executeApply, planApply, renderPlan } from "../apply.js";
import { parseManifests, readSources, type Manifest } from "../manifests.js";
import { paint } from "../io.js";
import type { CommandContext } from "../command-context.js";

const collect = (value: string, previous: string[]) => [...previous, value];

export function registerApply(program: Command, ctx: CommandContext): void {
  calls(
    program.command("apply"),
    ResourceService.method.getResource,
    ResourceService.method.createResource,
    ResourceService.method.updateResource,
  )
    .description("create or update the resources in manifests, showing what changes first")
    .requiredOption("-f, --filename <path>", "a YAML or JSON file, a directory of them, or - for stdin (repeatable)", collect, [])
    .option("--dry-run", "show what would change, change nothing")
    .addHelpText(
      "after",
      `
Manifests are resource documents as the REST API takes them (examples/*.json): resource_type,
id, desired_state (with or without the kind's key), metadata.labels. A file may hold several
(YAML documents separated by ---, or a JSON array). Resources are written in dependency order
(nodes, tenants, secrets, limits, networks, volumes, services, freezes), each only when it
differs: a second apply of the same files says "unchanged" and writes nothing. Labels and
annotations are left as stored unless the manifest gives them. Fields the controller sets
(states, convergence, versions) are ignored, so \`skipper get -o yaml\` output can be applied.

Examples:
  $ skipper apply -f examples/tenant.json -f examples/service.json
  $ skipper apply -f deploy/ --dry-run
  $ skipper get tenant shop -o yaml | sed 's/RELEASE: "1"/RELEASE: "2"/' | skipper apply -f -`,
    )
    .action(async (opts: { filename: string[]; dryRun?: boolean }) => {
      const manifests = parseManifests(await readSources(opts.filename, ctx.io.readStdin));
      const clients = ctx.clients();
      const steps = await planApply(clients, manifests);
      for (const line of renderPlan(steps)) ctx.io.out(colourPlanLine(line, ctx));
      if (opts.dryRun) {
        ctx.io.out("(dry run: nothing was changed)");
        return;
      }
      if (steps.every((s) => s.action === "unchanged")) {
        ctx.io.out("Nothing to change.");
        return;
      }
      const outcomes = await executeApply(clients, steps, (o) => {
        if (o.result !== "unchanged") ctx.io.err(`${o.name} ${o.result}`);
      });
      const count = (r: string) => outcomes.filter((o) => o.result === r).length;
      ctx.io.out(`Applied: ${count("created")} created, ${count("updated")} updated, ${count("unchanged")} unchanged.`);
    });

  calls(program.command("delete"), ResourceService.method.getResource, ResourceService.method.deleteResource)
    .description("delete the resources named in manifests (services before their tenant)")
    .requiredOption("-f, --filename <path>", "a YAML or JSON file, a directory of them, or - for stdin (repeatable)", collect, [])
    .option("--cascade", "also delete what references them (else a referenced resource is refused, naming its users)")
    .option("--delete-data", "also remove the named volumes of deleted services, tenants and volumes on their nodes")
    .option("--dry-run", "show what would be deleted, delete nothing")
    .addHelpText(
      "after",
      `
Deleted resources stay as tombstones (\`skipper get TYPE --include-deleted\`); the reconciler
takes down what ran for them. Deleting needs an admin credential.

Examples:
  $ skipper delete -f deploy/
  $ skipper delete -f examples/tenant.json --cascade --dry-run`,
    )
    .action(async (opts: { filename: string[]; cascade?: boolean; deleteData?: boolean; dryRun?: boolean }) => {
      const manifests = parseManifests(await readSources(opts.filename, ctx.io.readStdin)).reverse();
      const clients = ctx.clients();
      for (const m of manifests) {
        const name = `${m.type}/${m.id}`;
        if (!(await exists(ctx, m))) {
          ctx.io.out(`${name}: not found (nothing to delete)`);
          continue;
        }
        if (opts.dryRun) {
          ctx.io.out(`${name}: delete${opts.cascade ? " (with what references it)" : ""}`);
          continue;
        }
        const res = await clients.resources.deleteResource({
          resourceType: m.type,
          id: m.id,
          cascade: opts.cascade ?? false,
          deleteData: opts.deleteData ?? false,
        });
        ctx.io.out(`${name} deleted${res.cascaded.length > 0 ? ` (and ${res.cascaded.join(", ")})` : ""}`);
      }
      if (opts.dryRun) ctx.io.out("(dry run: nothing was deleted)");
    });
}

async function exists(ctx: CommandContext, m: Manifest): Promise<boolean> {
  try {
    await ctx.clients().resources.getResource({ resourceType: m.type, id: m.id });
    return true;
  } catch (e) {
    if (e instanceof ConnectError && e.code === Code.NotFound) return false;
    throw e;
  }
}

function colourPlanLine(line: string, ctx: CommandContext): string {
  const io = ctx.io;
  if (/: create\b/.test(line)) return paint(io, "green", line);
  if (/: update$/.test(line)) return paint(io, "yellow", line);
  if (/: unchanged$/.test(line)) return paint(io, "dim", line);
  if (/^\s+[+]/.test(line)) return paint(io, "green", line);
  if (/^\s+-/.test(line)) return paint(io, "red", line);
  return line;
}

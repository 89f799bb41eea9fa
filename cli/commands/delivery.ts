// `skipper delivery`: where each release stands in each environment of a delivery (the matrix), and
// what operators decide: approve or reject a release, veto a version, pin (the manual rollback) and
// unpin an environment. Deliveries and environments themselves are resources (`skipper apply`).
import type { Command } from "commander";
import { ConstraintKind, ConstraintPhase } from "../../gen/skipper/v1/delivery_pb.js";
import {
  CellState,
  DeliveryService,
  GetDeliveryStatusResponseSchema,
  type DeliveryMatrix,
} from "../../gen/skipper/v1/delivery_service_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import type { Io } from "../io.js";
import { paint } from "../io.js";
import { asJson, cut, documents, enumName, outputFormat, table, when } from "../output.js";

/** `skipper delivery` and its commands. */
export function registerDelivery(program: Command, ctx: CommandContext): void {
  const delivery = program.command("delivery").description("releases through environments: status, approve, reject, veto, pin, unpin");
  calls(delivery.command("status"), DeliveryService.method.getDeliveryStatus)
    .argument("<delivery>", "the delivery")
    .description("each recent release (rows) in each environment (columns): where it stands and why")
    .option("-o, --output <format>", "table, wide (every constraint of each waiting release), json or yaml", "table")
    .addHelpText("after", "\nExample:\n  $ skipper delivery status shop -o wide")
    .action(async (id: string, opts: { output: string }) => {
      const format = outputFormat(opts.output);
      const res = await ctx.clients().delivery.getDeliveryStatus({ id });
      if (format === "json" || format === "yaml")
        return ctx.io.out(documents(format, [asJson(GetDeliveryStatusResponseSchema, res)], false));
      ctx.io.out(matrixText(res.matrix!, format === "wide", ctx.io));
    });
  const decide = (name: "approve" | "reject", what: string) =>
    calls(delivery.command(name), name === "approve" ? DeliveryService.method.approveRelease : DeliveryService.method.rejectRelease)
      .argument("<environment>", "the environment")
      .argument("<release>", "the release id (rel-..., from `skipper delivery status`)")
      .option("--reason <text>", "why, recorded with who did it (required to reject)")
      .description(what)
      .addHelpText("after", `\nExample:\n  $ skipper delivery ${name} production rel-3f2a9c10b7e4d5a6f801 --reason "change ticket 4711"`)
      .action(async (env: string, releaseId: string, opts: { reason?: string }) => {
        const req = { id: env, releaseId, reason: opts.reason ?? "" };
        const c = ctx.clients().delivery;
        printEnvironment(ctx, (name === "approve" ? await c.approveRelease(req) : await c.rejectRelease(req)).environment);
      });
  decide("approve", "approve a waiting release for an environment that requires approval");
  decide("reject", "reject a waiting release for an environment: it never enters by itself (a pin still may)");
  calls(delivery.command("veto"), DeliveryService.method.vetoVersion)
    .argument("<environment>", "the environment")
    .argument("<artifact=version>", "the version to keep out, e.g. web=1.2.0")
    .requiredOption("--reason <text>", "why, recorded with who did it")
    .description("keep one artifact version out of one environment")
    .addHelpText("after", '\nExample:\n  $ skipper delivery veto production web=1.2.0 --reason "breaks the EU region"')
    .action(async (env: string, pair: string, opts: { reason: string }) => {
      const eq = pair.indexOf("=");
      const res = await ctx.clients().delivery.vetoVersion({
        id: env,
        artifactId: eq > 0 ? pair.slice(0, eq) : pair,
        version: eq > 0 ? pair.slice(eq + 1) : "",
        reason: opts.reason,
      });
      printEnvironment(ctx, res.environment);
    });
  calls(delivery.command("pin"), DeliveryService.method.pinEnvironment)
    .argument("<environment>", "the environment")
    .argument("<release>", "the release to hold it on: its current one, a candidate, or an earlier one (the manual rollback)")
    .requiredOption("--reason <text>", "why, recorded with who did it")
    .description("hold an environment on a release; nothing is promoted there until unpinned")
    .addHelpText("after", '\nExample:\n  $ skipper delivery pin production rel-0b7e4d5a6f8013f2a9c1 --reason "roll back: checkout errors"')
    .action(async (env: string, releaseId: string, opts: { reason: string }) => {
      printEnvironment(ctx, (await ctx.clients().delivery.pinEnvironment({ id: env, releaseId, reason: opts.reason })).environment);
    });
  calls(delivery.command("unpin"), DeliveryService.method.unpinEnvironment)
    .argument("<environment>", "the environment")
    .requiredOption("--reason <text>", "why, recorded with who did it")
    .description("clear an environment's pin and hold: promotion resumes")
    .addHelpText("after", '\nExample:\n  $ skipper delivery unpin production --reason "fix verified"')
    .action(async (env: string, opts: { reason: string }) => {
      printEnvironment(ctx, (await ctx.clients().delivery.unpinEnvironment({ id: env, reason: opts.reason })).environment);
    });
}

function printEnvironment(ctx: CommandContext, r: Resource | undefined): void {
  const st = r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : undefined;
  ctx.io.out(`environment ${r?.id ?? "?"}: ${st?.message || "not evaluated yet"}`);
  if (st?.pin) ctx.io.out(`  pinned to ${st.pin.release?.id ?? "?"} by ${st.pin.pinned?.actor ?? "?"} at ${when(st.pin.pinned?.at)}`);
}

const CELL_COLOURS: Partial<Record<CellState, "green" | "yellow" | "red">> = {
  [CellState.CURRENT]: "green",
  [CellState.IN_FLIGHT]: "yellow",
  [CellState.WAITING]: "yellow",
  [CellState.FAILED]: "red",
  [CellState.BAD]: "red",
  [CellState.PINNED]: "yellow",
};

/** The matrix as a table: a row per release, a column per environment; wide adds each constraint. */
export function matrixText(m: DeliveryMatrix, wide: boolean, io: Pick<Io, "color">): string {
  const head = ["RELEASE", "VERSIONS", ...m.environmentIds.map((e) => e.toUpperCase())];
  const rows = m.rows.map((row) => [
    row.release?.id ?? "",
    (row.release?.versions ?? []).map((v) => `${v.artifactId}=${v.version}`).join(","),
    ...row.cells.map((c) => {
      const state = enumName(CellState, c.state);
      const colour = CELL_COLOURS[c.state];
      return colour ? paint(io, colour, state) : state;
    }),
  ]);
  const lines = [table(head, rows), "", ...m.environmentIds.map((e, i) => `${e}: ${m.environmentMessages[i] ?? ""}`)];
  if (wide)
    for (const row of m.rows)
      for (const c of row.cells)
        for (const k of c.constraints)
          if (k.phase !== ConstraintPhase.PASSED)
            lines.push(
              `${row.release?.id} in ${c.environmentId}: ${enumName(ConstraintKind, k.kind)} ${enumName(ConstraintPhase, k.phase)}${k.subject ? ` (${k.subject})` : ""}: ${cut(k.reason, 120)}`,
            );
  return lines.join("\n");
}

// `skipper webhook`: subscriptions that send events to outside systems (WebhookService, admins
// only). The URL must be https:// (http:// is refused) and is a secret: the API shows its host
// only. create prints a generated shared secret once on stdout; list, get and deliveries show
// delivery status; pause and resume stop and restart the sending (deliveries keep queueing);
// redeliver queues a delivery again. --node-selector has a subscription's deliveries made by an
// agent of a node with those labels (endpoints only that node's network reaches).
import { readFileSync } from "node:fs";
import type { Command } from "commander";
import {
  WebhookDeliverySchema,
  WebhookDeliveryState,
  WebhookSchema,
  WebhookService,
  type Webhook,
} from "../../gen/skipper/v1/webhook_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";
import { collect, countFlag, labelFlags } from "../flags.js";
import { asJson, cut, documents, enumName, outputFormat, table, when } from "../output.js";

/** `skipper webhook` (create, list, get, pause, resume, delete, deliveries, redeliver). */
export function registerWebhooks(program: Command, ctx: CommandContext): void {
  const webhook = program
    .command("webhook")
    .alias("webhooks")
    .description("manage webhook subscriptions: create, list, get, pause, resume, delete, deliveries, redeliver (admin)");
  registerCreate(webhook, ctx);
  registerRead(webhook, ctx);
  registerPause(webhook, ctx);
  registerNodeSelector(webhook, ctx);
  registerDelete(webhook, ctx);
  registerDeliveries(webhook, ctx);
}

interface CreateOptions {
  event: string[];
  tenant?: string;
  description?: string;
  secretStdin?: boolean;
  receiverCaFile?: string;
  allowPrivateNetwork?: boolean;
  nodeSelector: string[];
}

// `webhook create`: a subscription; a generated secret once on stdout.
function registerCreate(webhook: Command, ctx: CommandContext): void {
  const cmd = webhook
    .command("create")
    .argument("<url>", "where to POST events: an https:// URL (http:// is refused); kept sealed, shown as its host only")
    .description("subscribe a URL to events; a generated shared secret is printed once, on stdout")
    .option("--event <pattern>", "event types: deployment.failed, deployment.*, node.offline, * (repeatable; default *)", collect, [])
    .option("--tenant <id>", "only this tenant's events")
    .option("--description <text>", "a note for people")
    .option("--secret-stdin", "read the shared secret (16+ characters) from stdin instead of generating one")
    .option("--receiver-ca-file <file>", "the CA that signs the receiver's certificate, when no public CA does")
    .option("--allow-private-network", "let deliveries go to loopback, private and link-local addresses")
    .option(
      "--node-selector <key=value>",
      "deliver through an agent of a node with these labels, from its network (repeatable, or k=v,k2=v2)",
      collect,
      [],
    )
    .addHelpText(
      "after",
      `
Each event is POSTed with x-skipper-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
"<t>.<body>")> (the README's Webhooks section shows how to check it).

Examples:
  $ skipper webhook create https://hooks.example.com/skipper/T0k3n --event 'deployment.*' --event node.offline > hook.secret
  $ skipper webhook create https://10.0.0.5/hook --allow-private-network --receiver-ca-file internal-ca.crt --tenant shop
  $ skipper webhook create https://ci.internal/hook --allow-private-network --node-selector site=b`,
    )
    .action(async (url: string, opts: CreateOptions) => {
      if (!/^https:\/\//i.test(url)) {
        throw new CliError(`the URL must be https:// (got ${JSON.stringify(url.replace(/^([a-z]+:\/\/[^/]*).*/i, "$1/..."))})`, {
          hint: "webhooks are delivered over TLS only; a receiver with a private CA takes --receiver-ca-file",
        });
      }
      const secret = opts.secretStdin ? (await ctx.io.readStdin()).trim() : "";
      let caPem = "";
      if (opts.receiverCaFile) {
        try {
          caPem = readFileSync(opts.receiverCaFile, "utf8");
        } catch (e) {
          throw new CliError(
            `cannot read --receiver-ca-file ${opts.receiverCaFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
          );
        }
      }
      const res = await ctx.clients().webhooks.createWebhook({
        url,
        eventTypes: opts.event.length > 0 ? opts.event : ["*"],
        tenantId: opts.tenant ?? "",
        description: opts.description ?? "",
        secret,
        caPem,
        allowPrivateNetwork: opts.allowPrivateNetwork ?? false,
        nodeSelector: selectorFlags(opts.nodeSelector),
      });
      const w = res.webhook!;
      const via = selectorText(w) === "-" ? "" : `, delivered by an agent of a node with ${selectorText(w)}`;
      ctx.io.err(`Webhook ${w.id} to ${w.urlHost} created for ${w.eventTypes.join(", ")}${w.tenantId ? ` of ${w.tenantId}` : ""}${via}.`);
      if (res.secret) {
        ctx.io.err("Its shared secret follows on stdout, shown only now.");
        ctx.io.out(res.secret);
      }
    });
  calls(cmd, WebhookService.method.createWebhook);
}

// `webhook list` and `webhook get`.
function registerRead(webhook: Command, ctx: CommandContext): void {
  const list = webhook
    .command("list")
    .alias("ls")
    .description("list subscriptions, oldest first, with their delivery status")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExample:\n  $ skipper webhook list")
    .action(async (opts: { output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const hooks = (await ctx.clients().webhooks.listWebhooks({})).webhooks;
      if (format !== "table")
        return ctx.io.out(
          documents(
            format,
            hooks.map((w) => asJson(WebhookSchema, w)),
            true,
          ),
        );
      if (hooks.length === 0) return ctx.io.err("No webhooks.");
      ctx.io.out(
        table(
          ["ID", "HOST", "EVENTS", "TENANT", "NODES", "PAUSED", "BACKLOG", "DEAD", "LAST SUCCESS", "LAST FAILURE"],
          hooks.map((w) => webhookRow(w)),
        ),
      );
    });
  calls(list, WebhookService.method.listWebhooks);

  const get = webhook
    .command("get")
    .argument("<id>", "the subscription's id")
    .description("show one subscription with its delivery status")
    .option("-o, --output <format>", "yaml or json", "yaml")
    .addHelpText("after", "\nExample:\n  $ skipper webhook get 3f9c2a1b")
    .action(async (id: string, opts: { output: string }) => {
      const format = outputFormat(opts.output, ["json", "yaml"]);
      const w = (await ctx.clients().webhooks.getWebhook({ id })).webhook!;
      ctx.io.out(documents(format, [asJson(WebhookSchema, w)], false));
    });
  calls(get, WebhookService.method.getWebhook);
}

function webhookRow(w: Webhook): string[] {
  const s = w.status;
  return [
    w.id,
    w.urlHost,
    w.eventTypes.join(","),
    w.tenantId || "-",
    selectorText(w),
    w.paused ? "yes" : "no",
    String(s?.backlog ?? 0n),
    String(s?.deadLettered ?? 0n),
    when(s?.lastSuccessAt),
    s?.lastFailure ? `${when(s.lastFailureAt)} ${cut(s.lastFailure, 40)}` : "-",
  ];
}

// Who delivers: "-" (the controller) or the node selector, k=v,k2=v2.
function selectorText(w: Webhook): string {
  const pairs = Object.entries(w.nodeSelector)
    .map(([k, v]) => `${k}=${v}`)
    .sort();
  return pairs.length > 0 ? pairs.join(",") : "-";
}

// --node-selector flags, each key=value or a comma-separated list of them.
function selectorFlags(flags: string[]): Record<string, string> {
  return labelFlags(
    flags.flatMap((f) => f.split(",")).filter((f) => f.trim() !== ""),
    "--node-selector",
  );
}

// `webhook node-selector`: which nodes' agents deliver (UpdateWebhook's node_selector).
function registerNodeSelector(webhook: Command, ctx: CommandContext): void {
  const cmd = webhook
    .command("node-selector")
    .argument("<id>", "the subscription's id")
    .argument("[labels...]", "key=value labels of the nodes whose agents deliver; none: the controller delivers again")
    .description("have a subscription's deliveries made by an agent of a node with these labels (or by the controller)")
    .addHelpText("after", "\nExamples:\n  $ skipper webhook node-selector 3f9c2a1b site=b\n  $ skipper webhook node-selector 3f9c2a1b")
    .action(async (id: string, labels: string[]) => {
      const nodeSelector = { labels: selectorFlags(labels) };
      const w = (await ctx.clients().webhooks.updateWebhook({ id, nodeSelector })).webhook!;
      const who = selectorText(w) === "-" ? "the controller" : `an agent of a node with ${selectorText(w)}`;
      ctx.io.out(`Webhook ${w.id} to ${w.urlHost} is delivered by ${who}.`);
    });
  calls(cmd, WebhookService.method.updateWebhook);
}

// `webhook pause|resume`: stop or restart the sending (UpdateWebhook's paused).
function registerPause(webhook: Command, ctx: CommandContext): void {
  for (const [name, paused, what] of [
    ["pause", true, "stop sending a subscription's deliveries (they keep queueing)"],
    ["resume", false, "send a paused subscription's deliveries again, the queued ones first"],
  ] as const) {
    const cmd = webhook
      .command(name)
      .argument("<id>", "the subscription's id")
      .description(what)
      .addHelpText("after", `\nExample:\n  $ skipper webhook ${name} 3f9c2a1b`)
      .action(async (id: string) => {
        const w = (await ctx.clients().webhooks.updateWebhook({ id, paused })).webhook!;
        ctx.io.out(`Webhook ${w.id} to ${w.urlHost} ${w.paused ? "paused" : "resumed"}.`);
      });
    calls(cmd, WebhookService.method.updateWebhook);
  }
}

// `webhook delete`: the subscription and its deliveries go (idempotent).
function registerDelete(webhook: Command, ctx: CommandContext): void {
  const cmd = webhook
    .command("delete")
    .argument("<id...>", "the subscriptions' ids")
    .description("delete subscriptions and their deliveries (idempotent)")
    .addHelpText("after", "\nExample:\n  $ skipper webhook delete 3f9c2a1b")
    .action(async (ids: string[]) => {
      for (const id of ids) {
        await ctx.clients().webhooks.deleteWebhook({ id });
        ctx.io.out(`Webhook ${id} deleted.`);
      }
    });
  calls(cmd, WebhookService.method.deleteWebhook);
}

// `webhook deliveries` and `webhook redeliver`.
function registerDeliveries(webhook: Command, ctx: CommandContext): void {
  const list = webhook
    .command("deliveries")
    .argument("<id>", "the subscription's id")
    .description("list a subscription's deliveries, oldest first")
    .option("--state <state>", "only pending, delivered or dead_lettered ones")
    .option("--limit <n>", "at most this many", "100")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper webhook deliveries 3f9c2a1b --state dead_lettered")
    .action(async (webhookId: string, opts: { state?: string; limit: string; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const state = opts.state === undefined ? WebhookDeliveryState.UNSPECIFIED : deliveryState(opts.state);
      const pageSize = countFlag(opts.limit, "--limit", 1, 1000);
      const res = await ctx.clients().webhooks.listWebhookDeliveries({ webhookId, state, pageSize });
      const items = res.deliveries;
      if (format !== "table")
        return ctx.io.out(
          documents(
            format,
            items.map((d) => asJson(WebhookDeliverySchema, d)),
            true,
          ),
        );
      if (items.length === 0) return ctx.io.err(`No deliveries${opts.state ? ` ${opts.state}` : ""} for webhook ${webhookId}.`);
      ctx.io.out(
        table(
          ["ID", "EVENT", "STATE", "ATTEMPTS", "LAST STATUS", "NODE", "CREATED", "LAST FAILURE"],
          items.map((d) => [
            d.id,
            d.eventType,
            enumName(WebhookDeliveryState, d.state),
            String(d.attempts),
            d.lastStatus ? String(d.lastStatus) : "-",
            // The node whose agent made the last attempt; "-" when the controller made it.
            d.lastNodeId || "-",
            when(d.createdAt),
            cut(d.lastFailure, 50) || "-",
          ]),
        ),
      );
    });
  calls(list, WebhookService.method.listWebhookDeliveries);

  const redeliver = webhook
    .command("redeliver")
    .argument("<id>", "the subscription's id")
    .argument("<delivery>", "the delivery's id")
    .description("queue a delivery again, now (a dead-lettered or a delivered one)")
    .addHelpText("after", "\nExample:\n  $ skipper webhook redeliver 3f9c2a1b 7d1e...")
    .action(async (webhookId: string, id: string) => {
      const d = (await ctx.clients().webhooks.redeliverWebhookDelivery({ webhookId, id })).delivery!;
      ctx.io.out(`Delivery ${d.id} queued again (${enumName(WebhookDeliveryState, d.state)}).`);
    });
  calls(redeliver, WebhookService.method.redeliverWebhookDelivery);
}

/** A state as typed: dead_lettered, DEAD_LETTERED or WEBHOOK_DELIVERY_STATE_DEAD_LETTERED. */
function deliveryState(text: string): WebhookDeliveryState {
  const name = text
    .toUpperCase()
    .replace(/^WEBHOOK_DELIVERY_STATE_/, "")
    .replace(/-/g, "_");
  const value = (WebhookDeliveryState as unknown as Record<string, number>)[name];
  if (value === undefined || value === WebhookDeliveryState.UNSPECIFIED) {
    throw new CliError(`unknown delivery state ${JSON.stringify(text)}`, { hint: "one of pending, delivered, dead_lettered" });
  }
  return value;
}

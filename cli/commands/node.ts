// `skipper node`: a node's credentials and its record. register (NodeService.RegisterNode) and
// rotate-token print the node's bearer token once on stdout (the controller keeps a hash);
// enroll-token and join-command make an enrollment token instead (a host that enrolls gets a
// client certificate; join-command prints the one line a host runs to join, /v1/join.sh); revoke-certificates refuses the node's certificates; delete removes the
// node's record (a tombstone; the reconciler takes down what ran there). What was done is said on
// stderr, so the token can go straight to a file.
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { AgentBundleService } from "../../gen/skipper/v1/agent_bundle_service_pb.js";
import { joinLine } from "../../common/join-line.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { collect, countFlag, durationFlag, labelFlags } from "../flags.js";
import { when } from "../output.js";
import { registerNodeExec } from "./node-exec.js";

/** `skipper node` and its commands. */
export function registerNode(program: Command, ctx: CommandContext): void {
  const node = program
    .command("node")
    .description("node administration: register, delete, tokens, enrollment, certificates (admin); a command on a host (operators)")
    .addHelpText("after", "\nList the nodes with `skipper nodes`, one in detail with `skipper describe node NODE`.");
  registerRegister(node, ctx);
  registerRotateToken(node, ctx);
  registerDelete(node, ctx);
  registerEnrollToken(node, ctx);
  registerJoinCommand(node, ctx);
  registerRevokeCertificates(node, ctx);
  registerNodeExec(node, ctx);
}

// `node register`: a new node and its token, once, on stdout.
function registerRegister(node: Command, ctx: CommandContext): void {
  const cmd = node
    .command("register")
    .argument("<node>", "the new node's id, e.g. host-2")
    .description("register a node; its agent's token is printed once, on stdout")
    .option("--display-name <text>", "a name for people")
    .option("--label <key=value>", "a placement label (repeatable)", collect, [])
    .option("--trust-label <key>", "a key of the labels its agent reports that placement may trust (repeatable)", collect, [])
    .addHelpText(
      "after",
      `
The token is the agent's credential (skippy --token-file); the controller keeps only its hash.
Registering an existing node is CONFLICT: rotate its token instead (\`skipper node rotate-token\`).

Examples:
  $ skipper node register host-2 --label env=dev > host-2.token
  $ skipper node register edge-7 --label region=eu --trust-label zone > edge-7.token`,
    )
    .action(async (nodeId: string, opts: { displayName?: string; label: string[]; trustLabel: string[] }) => {
      const res = await ctx.clients().nodes.registerNode({
        nodeId,
        displayName: opts.displayName ?? "",
        labels: labelFlags(opts.label),
        trustedLabelKeys: opts.trustLabel,
      });
      ctx.io.err(`Node ${res.node?.id ?? nodeId} registered. Its token follows on stdout, shown only now: the controller keeps a hash.`);
      ctx.io.out(res.token);
    });
  calls(cmd, NodeService.method.registerNode);
}

// `node rotate-token`: a new token, once; the old one is refused from now on.
function registerRotateToken(node: Command, ctx: CommandContext): void {
  const cmd = node
    .command("rotate-token")
    .argument("<node>", "the node")
    .description("replace a node's token; the new one is printed once, on stdout, and the old one stops working")
    .addHelpText(
      "after",
      `
Streams the old token opened end at once, on every controller; a certificate the node minted with
it dies too. Give the agent the new token (its --token-file) and restart it.

Example:
  $ skipper node rotate-token host-2 > host-2.token`,
    )
    .action(async (nodeId: string) => {
      const res = await ctx.clients().nodes.rotateNodeToken({ nodeId });
      ctx.io.err(`Node ${nodeId}: new token on stdout, shown only now; the old one is refused from now on.`);
      ctx.io.out(res.token);
    });
  calls(cmd, NodeService.method.rotateNodeToken);
}

// `node delete`: the node's record goes (a tombstone), with what names it when --cascade.
function registerDelete(node: Command, ctx: CommandContext): void {
  const cmd = node
    .command("delete")
    .argument("<node...>", "the nodes")
    .description("delete nodes: their credentials stop working and their records stay as tombstones")
    .option("--cascade", "also delete what references the node (else a referenced node is refused, naming its users)")
    .addHelpText(
      "after",
      `
A deleted node's token and certificates are refused from its next call; stop its agent. Its
tombstone shows with \`skipper get nodes --include-deleted\`.

Examples:
  $ skipper node delete host-2
  $ skipper node delete demo-2 demo-3 demo-4`,
    )
    .action(async (nodeIds: string[], opts: { cascade?: boolean }) => {
      for (const id of nodeIds) {
        const res = await ctx
          .clients()
          .resources.deleteResource({ resourceType: "node", id, cascade: opts.cascade ?? false, deleteData: false });
        ctx.io.out(`node/${id} deleted${res.cascaded.length > 0 ? ` (and ${res.cascaded.join(", ")})` : ""}`);
      }
    });
  calls(cmd, ResourceService.method.deleteResource);
}

interface EnrollOptions {
  uses: string;
  ttl: string;
  label: string[];
  certificateTtl?: string;
  description?: string;
}

/** The enrollment token options `node enroll-token`, `node join-command` and `enrollment-token create` share. */
export function enrollOptions(cmd: Command, uses = "1"): Command {
  return cmd
    .option("--uses <n>", "enrollments it allows", uses)
    .option("--ttl <duration>", "how long it stays valid", "24h")
    .option("--label <key=value>", "a label for the node it enrolls (repeatable)", collect, [])
    .option("--certificate-ttl <duration>", "lifetime of the node's client certificates (default 24h)")
    .option("--description <text>", "a note for people");
}

/** Creates an enrollment token from the shared options; `nodeId` "" for any node. */
export async function createEnrollmentToken(ctx: CommandContext, nodeId: string, opts: EnrollOptions) {
  return ctx.clients().enrollment.createEnrollmentToken({
    nodeId,
    uses: countFlag(opts.uses, "--uses", 1, 10_000),
    ttl: durationFromMs(durationFlag(opts.ttl, "--ttl", 1000)),
    labels: labelFlags(opts.label),
    ...(opts.certificateTtl ? { certificateTtl: durationFromMs(durationFlag(opts.certificateTtl, "--certificate-ttl", 1000)) } : {}),
    description: opts.description ?? "",
  });
}

// `node enroll-token`: a token a host enrolls with, its text once on stdout.
function registerEnrollToken(node: Command, ctx: CommandContext): void {
  const cmd = enrollOptions(
    node
      .command("enroll-token")
      .argument("<node>", "the node id the token may enroll")
      .description("create an enrollment token for a host; its text is printed once, on stdout"),
  )
    .addHelpText(
      "after",
      `
On the host, skippy makes its key pair, sends a certificate signing request with the token,
and from then on authenticates with its client certificate:
  skippy --controller https://CONTROLLER:8443 --ca-file ca.crt --node-id NODE --enroll-token-file host.enroll
(\`skipper node join-command NODE\` prints that line with the token in it.)

Example:
  $ skipper node enroll-token host-9 --label env=dev > host-9.enroll`,
    )
    .action(async (nodeId: string, opts: EnrollOptions) => {
      const res = await createEnrollmentToken(ctx, nodeId, opts);
      const t = res.enrollmentToken!;
      ctx.io.err(`Enrollment token ${t.id} for node ${nodeId} created: ${t.uses} use(s), valid until ${when(t.expiresAt)}.`);
      ctx.io.err("Its text follows on stdout, shown only now: the controller keeps a hash.");
      ctx.io.out(res.token);
    });
  calls(cmd, EnrollmentService.method.createEnrollmentToken);
}

// `node join-command`: the line a new host runs to join (or, --manual, the install commands).
function registerJoinCommand(node: Command, ctx: CommandContext): void {
  const cmd = enrollOptions(
    node
      .command("join-command")
      .argument("[node]", "the node id the host joins as (default: any; the host's name)")
      .description("print the line that makes a host join (with a new single-use enrollment token)")
      .option("--controller <url>", "the controller's URL as the host reaches it (default: the one this CLI talks to)")
      .option("--manual", "print the skippy install commands instead, for a host given the bundle and the CA by hand")
      .option("--host-ca-file <path>", "with --manual: where the controller's CA certificate will be on the host", "ca.crt")
      .option("--bundle <path>", "with --manual: where the agent bundle (npm run bundle:agent) will be on the host", "skippy.mjs"),
  )
    .addHelpText(
      "after",
      `
The line (on stdout) holds the token: it enrolls once, within --ttl, only from the key pair the
host makes (and only as NODE when given). Run it on the host as root; the host needs curl and
Node.js 20+. curl trusts the controller by the pin of its certificate's key; the script it gets
downloads the agent bundle, checks its SHA-256 and the controller's Ed25519 signature, then runs
\`skippy join\`: enroll, install the systemd unit, start it. The pin changes when the controller's
certificate is reissued with a new key: print a new line then.

Examples:
  $ skipper node join-command --label env=dev --controller https://controller.example:8443
  $ skipper node join-command host-9 --manual`,
    )
    .action(
      async (
        nodeId: string | undefined,
        opts: EnrollOptions & { controller?: string; manual?: boolean; hostCaFile: string; bundle: string },
      ) => {
        const controller = (opts.controller ?? ctx.clients().target.server).replace(/\/+$/, "").replace(/\/v1$/, "");
        const served = opts.manual ? undefined : await ctx.clients().agentBundles.getAgentBundle({});
        if (served && (!served.manifest || !served.tlsPin))
          throw new Error(
            served.tlsPin
              ? "the controller serves no agent bundle (start it with --agent-bundle, or build dist/skippy.mjs): use --manual"
              : "the controller serves plain HTTP: a host can only join it with --manual",
          );
        const res = await createEnrollmentToken(ctx, nodeId ?? "", opts);
        const t = res.enrollmentToken!;
        const who = nodeId ? `for node ${nodeId}` : "for any node";
        ctx.io.err(`Enrollment token ${t.id} ${who}: ${t.uses} use(s), valid until ${when(t.expiresAt)}. On the host, as root:`);
        if (served) {
          ctx.io.out(joinLine({ url: controller, pin: served.tlsPin, token: res.token, nodeId }));
          return;
        }
        const node = nodeId ?? "$(hostname)";
        ctx.io.out(
          `printf '%s\\n' '${res.token}' | node ${opts.bundle} install --controller ${controller} --ca-file ${opts.hostCaFile} --node-id ${node} --enroll-token-file -`,
        );
        ctx.io.out("systemctl daemon-reload && systemctl enable --now skippy");
      },
    );
  calls(cmd, EnrollmentService.method.createEnrollmentToken, AgentBundleService.method.getAgentBundle);
}

// `node revoke-certificates`: the node's client certificates are refused from its next call.
function registerRevokeCertificates(node: Command, ctx: CommandContext): void {
  const cmd = node
    .command("revoke-certificates")
    .argument("<node>", "the node")
    .description("refuse every client certificate issued to the node, and the enrollment tokens it enrolled with")
    .option("--reason <text>", "why, recorded in the audit trail")
    .addHelpText(
      "after",
      `
The node comes back only through a new enrollment token (or its bearer token). Idempotent.

Example:
  $ skipper node revoke-certificates host-9 --reason "host re-imaged"`,
    )
    .action(async (nodeId: string, opts: { reason?: string }) => {
      const res = await ctx.clients().enrollment.revokeNodeCertificates({ nodeId, reason: opts.reason ?? "" });
      ctx.io.out(`Node ${nodeId}: ${res.revoked} certificate(s) revoked.`);
    });
  calls(cmd, EnrollmentService.method.revokeNodeCertificates);
}

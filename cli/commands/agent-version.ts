// `skipper agent-version add FILE`: hands an agent bundle (npm run bundle:agent) to the controller,
// which checks the version it states, keeps the bytes and signs the manifest (PUT
// /v1/agent-versions/{version}/skippy.mjs). The versions held are agent_version resources
// (`skipper get agent_version`); an agent_update resource says which one the nodes run
// (`skipper apply -f`), and the controller rolls it out.
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import type { Command } from "commander";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";

/** `skipper agent-version`. */
export function registerAgentVersion(program: Command, ctx: CommandContext): void {
  const cmd = program.command("agent-version").description("the agent versions the controller holds for self-update");
  cmd
    .command("add")
    .description("upload an agent bundle as a version the controller holds and signs")
    .argument("<file>", "the bundle (npm run bundle:agent writes dist/skippy.mjs)")
    .option("--notes <text>", "a note kept with the version (release notes, a ticket)", "")
    .addHelpText(
      "after",
      `
The version is the one the bundle states in its first lines ("// skippy-bundle-version: X").
Adding the same bytes again changes nothing; other bytes under a version already held are refused.
Then roll it out with an agent_update resource:

  $ skipper agent-version add dist/skippy.mjs
  $ skipper apply -f - <<'EOF'
  {"id": "fleet", "resource_type": "agent_update",
   "desired_state": {"agent_update": {"version": "0.2.0",
     "policy": {"max_parallel": 1, "failure_budget": {"count": 0}}}}}
  EOF
  $ skipper get agent_update fleet`,
    )
    .action(async (file: string, opts: { notes: string }) => {
      let bytes: Buffer;
      try {
        bytes = readFileSync(file);
      } catch (e) {
        throw new CliError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
      }
      const version = /^\/\/ skippy-bundle-version: (\S+)$/m.exec(bytes.subarray(0, 1024).toString("latin1"))?.[1];
      if (!version)
        throw new CliError(`${file} is not an agent bundle: it states no version`, { hint: "build one with npm run bundle:agent" });
      const target = ctx.clients().target;
      const path = `/v1/agent-versions/${encodeURIComponent(version)}/skippy.mjs${opts.notes ? `?notes=${encodeURIComponent(opts.notes)}` : ""}`;
      const res = await put(target, path, bytes);
      const body = JSON.parse(res.body || "{}") as { error?: { code?: string; message?: string }; data?: unknown };
      if (res.status >= 400) throw new CliError(`${body.error?.code ?? res.status}: ${body.error?.message ?? res.body.slice(0, 300)}`);
      ctx.io.out(
        res.status === 201
          ? `agent version ${version} added (${bytes.length} bytes)`
          : `agent version ${version} was already held with these bytes: nothing changed`,
      );
    });
}

// One PUT over HTTP/2 with the target's CA and credential.
function put(
  target: { server: string; caFile?: string; token?: string },
  path: string,
  body: Buffer,
): Promise<{ status: number; body: string }> {
  const ca = target.caFile ? { ca: readFileSync(target.caFile, "utf8") } : {};
  return new Promise((resolve, reject) => {
    const session = http2.connect(target.server, ca);
    session.on("error", (e) => reject(new CliError(`cannot reach ${target.server}: ${e.message}`)));
    const headers: http2.OutgoingHttpHeaders = {
      ":method": "PUT",
      ":path": path,
      "content-type": "text/javascript",
      "content-length": String(body.length),
    };
    if (target.token) headers.authorization = `Bearer ${target.token}`;
    const req = session.request(headers);
    let status = 0;
    const chunks: Buffer[] = [];
    req.on("response", (h) => {
      status = Number(h[":status"] ?? 0);
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("error", (e) => {
      session.destroy();
      reject(new CliError(`uploading to ${target.server}: ${e.message}`));
    });
    req.on("end", () => {
      session.close();
      resolve({ status, body: Buffer.concat(chunks).toString("utf8") });
    });
    req.end(body);
  });
}

// The terminal cases of exec-e2e.test.ts (`skipper exec -it`, TerminalService.Attach), run in its
// world: a controller and two agents on real engines, the tenant's service on both. The CLI is a
// child process with pipes (the tty is the container's); a typed client drives the resize frame.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { Role } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../../gen/skipper/v1/audit_service_pb.js";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { TerminalService, type AttachRequest } from "../../gen/skipper/v1/terminal_service_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { AttachRequestSchema } from "../../gen/skipper/v1/terminal_service_pb.js";
import { expect, it } from "vitest";
import type { ControllerProcess } from "./processes.js";

const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));

interface World {
  ctl: ControllerProcess;
  env: NodeJS.ProcessEnv;
  tenant: string;
  service: string;
  cli(args: string[], opts?: { token?: string; input?: string }): Promise<{ code: number | null; stdout: string; stderr: string }>;
}

/** A CLI process with its stdin open: output collected as bytes, exit awaited. */
class CliChild {
  readonly child: ChildProcessWithoutNullStreams;
  private readonly out: Buffer[] = [];
  err = "";
  readonly exited: Promise<number | null>;
  private waiters: (() => void)[] = [];

  constructor(args: string[], env: NodeJS.ProcessEnv) {
    this.child = spawn(process.execPath, [CLI, ...args], { env, stdio: ["pipe", "pipe", "pipe"] });
    this.child.stdout.on("data", (d: Buffer) => {
      this.out.push(d);
      for (const w of this.waiters.splice(0)) w();
    });
    this.child.stderr.on("data", (d: Buffer) => (this.err += d.toString("utf8")));
    this.exited = new Promise((resolve) => this.child.once("close", resolve));
  }

  get stdout(): Buffer {
    return Buffer.concat(this.out);
  }

  /** Resolves once stdout matches `pattern` (the test's own timeout bounds the wait). */
  async waitFor(pattern: RegExp): Promise<RegExpExecArray> {
    for (;;) {
      const m = pattern.exec(this.stdout.toString("utf8"));
      if (m) return m;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }
}

/** A request stream the test feeds as it goes. */
function feed(): { push(r: MessageInitShape<typeof AttachRequestSchema>): void; end(): void; stream: AsyncIterable<AttachRequest> } {
  const queue: MessageInitShape<typeof AttachRequestSchema>[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  return {
    push: (r) => {
      queue.push(r);
      wake?.();
    },
    end: () => {
      ended = true;
      wake?.();
    },
    stream: (async function* () {
      for (;;) {
        const next = queue.shift();
        if (next) {
          yield next as AttachRequest;
          continue;
        }
        if (ended) return;
        await new Promise<void>((r) => {
          wake = r;
        });
        wake = undefined;
      }
    })(),
  };
}

export function terminalCases(world: () => World): void {
  const base = (w: World) => ["exec", w.tenant, w.service, "--node", "exec-a"];

  it("-t: the command has a tty of the size LINES x COLUMNS gave; typed input runs and the exit code is the command's", async () => {
    const w = world();
    // Typed into a shell: an engine before API 1.42 takes the size only after the command started
    // (as `docker exec -t` does there); the agent sets it before it writes any input.
    const shell = new CliChild([...base(w), "-it", "--", "sh"], { ...w.env, LINES: "33", COLUMNS: "101" });
    shell.child.stdin.write("tty; stty size; echo h''i; exit 3\n");
    expect(await shell.exited, shell.err).toBe(3);
    const text = shell.stdout.toString("utf8");
    expect(text).toMatch(/(^|\n)\/dev\/pts\/\d+\r\n33 101\r\nhi\r\n/);
    shell.child.stdin.end();
  }, 60_000);

  it("a resize frame changes the tty's size (stty size before and after)", async () => {
    const w = world();
    const input = feed();
    input.push({
      kind: {
        case: "open",
        value: { tenantId: w.tenant, service: w.service, nodeId: "exec-b", argv: ["sh"], tty: true, size: { rows: 24, cols: 80 } },
      },
    });
    input.push({ kind: { case: "stdin", value: new TextEncoder().encode("stty size\n") } });
    let text = "";
    let resized = false;
    let exitCode: number | undefined;
    let opened = "";
    for await (const m of w.ctl.admin(TerminalService).attach(input.stream, { timeoutMs: 0 })) {
      if (m.kind.case === "opened") opened = m.kind.value.nodeId;
      if (m.kind.case === "stdout") text += new TextDecoder().decode(m.kind.value);
      if (m.kind.case === "exitCode") exitCode = m.kind.value;
      if (!resized && /\r\n24 80\r\n/.test(text)) {
        resized = true;
        input.push({ kind: { case: "resize", value: { rows: 50, cols: 132 } } });
        input.push({ kind: { case: "stdin", value: new TextEncoder().encode("stty size; exit\n") } });
      }
    }
    input.end();
    expect(opened).toBe("exec-b");
    expect(text).toMatch(/\r\n24 80\r\n[\s\S]*\r\n50 132\r\n/);
    expect(exitCode).toBe(0);
  }, 60_000);

  it("without a tty, stdin streamed in comes back byte-exact past 1 MiB; stderr stays apart", async () => {
    const w = world();
    const data = randomBytes(1536 * 1024 + 7);
    const input = feed();
    input.push({
      kind: { case: "open", value: { tenantId: w.tenant, service: w.service, nodeId: "exec-a", argv: ["sh", "-c", "cat; echo done >&2"] } },
    });
    for (let at = 0; at < data.length; at += 64 * 1024) input.push({ kind: { case: "stdin", value: data.subarray(at, at + 64 * 1024) } });
    input.push({ kind: { case: "closeStdin", value: true } });
    const out: Buffer[] = [];
    let err = "";
    let exitCode: number | undefined;
    for await (const m of w.ctl.admin(TerminalService).attach(input.stream, { timeoutMs: 0 })) {
      if (m.kind.case === "stdout") out.push(Buffer.from(m.kind.value));
      if (m.kind.case === "stderr") err += new TextDecoder().decode(m.kind.value);
      if (m.kind.case === "exitCode") exitCode = m.kind.value;
    }
    input.end();
    const got = Buffer.concat(out);
    expect([exitCode, got.length, err]).toEqual([0, data.length, "done\n"]);
    expect(got.equals(data)).toBe(true);
  }, 120_000);

  it("the client going away ends the command in the container", async () => {
    const w = world();
    const marker = `sleep ${3000 + Math.floor(Math.random() * 900)}`;
    const shell = new CliChild([...base(w), "-it", "--", "sh", "-c", `echo started; exec ${marker}`], w.env);
    await shell.waitFor(/started/);
    const running = async () => (await w.cli(["exec", w.tenant, w.service, "--node", "exec-a", "--", "ps"])).stdout.includes(marker);
    expect(await running()).toBe(true);
    shell.child.kill("SIGKILL");
    await shell.exited;
    // The controller sees the stream reset, tells the agent, which drops the exec's connection:
    // the tty closes and the command gets SIGHUP. Each look is one exec order.
    let gone = false;
    for (let look = 0; look < 30 && !gone; look++) gone = !(await running());
    expect(gone).toBe(true);
  }, 120_000);

  it("a viewer is refused and nothing runs; a node without a session here is UNAVAILABLE, saying why", async () => {
    const w = world();
    const viewer = (await w.ctl.admin(AccessService).createApiKey({ name: "terminal-viewer", role: Role.VIEWER })).secret;
    const refused = await w.cli([...base(w), "-it", "--", "touch", "/tmp/viewer-terminal"], { token: viewer });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/FORBIDDEN|PERMISSION/);
    const check = await w.cli([...base(w), "--", "test", "-e", "/tmp/viewer-terminal"]);
    expect(check.code).toBe(1);
    await w.ctl.admin(NodeService).registerNode({ nodeId: "exec-ghost" });
    const ghost = await w.cli(["exec", w.tenant, w.service, "--node", "exec-ghost", "-it", "--", "sh"]);
    expect(ghost.code).toBe(1);
    expect(ghost.stderr).toContain("node exec-ghost holds no session on this controller");
  }, 60_000);

  it("the audit trail has the terminal (who, tenant) and its event the node, service and program (never its arguments), never stdin", async () => {
    const w = world();
    const secretInput = `typed-${randomBytes(6).toString("hex")}`;
    const run = new CliChild([...base(w), "-it", "--", "sh", "-c", "read x; echo got"], w.env);
    run.child.stdin.end(`${secretInput}\n`);
    expect(await run.exited, run.err).toBe(0);
    const events = (await w.ctl.admin(EventService).listEvents({ type: "terminal_opened", tenantId: w.tenant, pageSize: 100 })).events;
    // This case's terminal is the tenant's latest (the cases run one after another).
    const opened = [...events]
      .sort(
        (a, b) =>
          Number((a.timestamp?.seconds ?? 0n) - (b.timestamp?.seconds ?? 0n)) || (a.timestamp?.nanos ?? 0) - (b.timestamp?.nanos ?? 0),
      )
      .at(-1);
    expect(opened?.data).toMatchObject({ command: "sh" });
    expect(JSON.stringify(opened?.data)).not.toContain("read x");
    expect(opened).toMatchObject({ nodeId: "exec-a", resourceType: "terminal", tenantId: w.tenant });
    expect(opened?.data).toMatchObject({ service: w.service, tty: true });
    const entries = (await w.ctl.admin(AuditService).listAuditEntries({ pageSize: 1000 })).entries;
    const entry = entries.find((e) => e.target === `terminal/${opened!.resourceId}`);
    expect(entry).toMatchObject({ rpc: "skipper.v1.TerminalService/Attach", tenantId: w.tenant, outcome: "OK" });
    const closed = (await w.ctl.admin(EventService).listEvents({ type: "terminal_closed", resourceId: opened!.resourceId })).events;
    expect(closed[0]?.data).toMatchObject({ exit_code: 0 });
    const everything = JSON.stringify([entries, events, closed], (_k, v) => (typeof v === "bigint" ? v.toString() : v));
    expect(everything).not.toContain(secretInput);
  }, 60_000);
}

// The terminals open on one agent's session (TerminalService.Attach relays them): each has an id,
// takes one of the node's slots (reserve, before anything is recorded of it), goes out as
// exec_open, its input (and the acknowledgement of its output) as exec_input, and comes back as
// the agent's exec_output messages until one says it exited or failed. The session ending ends
// every terminal on it.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SessionExecInput, SessionExecOpen, SessionExecOutput, SessionResponseSchema } from "../../gen/skipper/v1/node_service_pb.js";
import { SkipperError } from "../base/errors.js";

type SessionMessage = NonNullable<MessageInitShape<typeof SessionResponseSchema>["kind"]>;

/** Terminals one node may have open through this controller at once. */
export const MAX_TERMINALS_PER_NODE = 8;

/** Where a terminal's output goes (the Attach call relaying it). */
export interface TerminalEnd {
  /** Output, the exit code, or why it broke (the agent's last message). */
  deliver(output: SessionExecOutput): void;
  /** The node's session ended: the terminal is gone with it. */
  sessionEnded(): void;
}

type InputFields = Omit<SessionExecInput, "$typeName" | "$unknown" | "execId">;

export class SessionTerminals {
  /** Each terminal holding a slot: where its output goes, and whether its exec_open went out. */
  private readonly open = new Map<string, { end: TerminalEnd; sent: boolean }>();
  private ended = false;

  constructor(
    private readonly nodeId: string | (() => string),
    private readonly send: (kind: SessionMessage) => void,
  ) {}

  /** Takes a slot for `execId`, sending nothing yet; RESOURCE_EXHAUSTED when the node has its share open, UNAVAILABLE once the session ended. */
  reserve(execId: string, end: TerminalEnd): void {
    const node = typeof this.nodeId === "string" ? this.nodeId : this.nodeId();
    if (this.ended) throw new SkipperError("UNAVAILABLE", `the session of node ${node} ended`, { node_id: node });
    if (this.open.size >= MAX_TERMINALS_PER_NODE)
      throw new SkipperError("RESOURCE_EXHAUSTED", `node ${node} has ${MAX_TERMINALS_PER_NODE} terminals open through this controller`, {
        node_id: node,
      });
    this.open.set(execId, { end, sent: false });
  }

  /** Opens a reserved terminal on the agent (nothing when it was closed meanwhile). */
  start(open: Omit<SessionExecOpen, "$typeName" | "$unknown">): void {
    const t = this.open.get(open.execId);
    if (!t || t.sent) return;
    t.sent = true;
    this.send({ case: "execOpen", value: open });
  }

  /** Input for an open terminal (nothing once it ended, or before its open went out). */
  input(execId: string, fields: Partial<InputFields>): void {
    if (!this.open.get(execId)?.sent) return;
    this.send({ case: "execInput", value: { execId, ...fields } });
  }

  /** The client went: the slot is free and the agent stops the terminal (when it was opened there). */
  close(execId: string): void {
    const t = this.open.get(execId);
    if (!t) return;
    this.open.delete(execId);
    if (t.sent) this.send({ case: "execInput", value: { execId, close: true } });
  }

  /** What the agent sent of a terminal; its last message (exited, error) closes it here. */
  output(o: SessionExecOutput): void {
    const t = this.open.get(o.execId);
    if (!t) return;
    if (o.exited || o.error) this.open.delete(o.execId);
    t.end.deliver(o);
  }

  /** The session ended: every terminal on it is told. */
  sessionEnded(): void {
    this.ended = true;
    const ends = [...this.open.values()];
    this.open.clear();
    for (const e of ends) e.end.sessionEnded();
  }

  get size(): number {
    return this.open.size;
  }
}

// The terminals open on one agent's session (TerminalService.Attach relays them): each has an id,
// goes out as exec_open, its input as exec_input, and comes back as the agent's exec_output
// messages until one says it exited or failed. The session ending ends every terminal on it.
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
  private readonly open = new Map<string, TerminalEnd>();
  private ended = false;

  constructor(
    private readonly nodeId: string | (() => string),
    private readonly send: (kind: SessionMessage) => void,
  ) {}

  /** Opens a terminal on the agent; RESOURCE_EXHAUSTED when the node has its share open, UNAVAILABLE once the session ended. */
  start(open: Omit<SessionExecOpen, "$typeName" | "$unknown">, end: TerminalEnd): void {
    const node = typeof this.nodeId === "string" ? this.nodeId : this.nodeId();
    if (this.ended) throw new SkipperError("UNAVAILABLE", `the session of node ${node} ended`, { node_id: node });
    if (this.open.size >= MAX_TERMINALS_PER_NODE)
      throw new SkipperError("RESOURCE_EXHAUSTED", `node ${node} has ${MAX_TERMINALS_PER_NODE} terminals open through this controller`, {
        node_id: node,
      });
    this.open.set(open.execId, end);
    this.send({ case: "execOpen", value: open });
  }

  /** Input for an open terminal (nothing once it ended). */
  input(execId: string, fields: Partial<InputFields>): void {
    if (!this.open.has(execId)) return;
    this.send({ case: "execInput", value: { execId, ...fields } });
  }

  /** The client went: the agent stops the terminal. */
  close(execId: string): void {
    if (!this.open.delete(execId)) return;
    this.send({ case: "execInput", value: { execId, close: true } });
  }

  /** What the agent sent of a terminal; its last message (exited, error) closes it here. */
  output(o: SessionExecOutput): void {
    const end = this.open.get(o.execId);
    if (!end) return;
    if (o.exited || o.error) this.open.delete(o.execId);
    end.deliver(o);
  }

  /** The session ended: every terminal on it is told. */
  sessionEnded(): void {
    this.ended = true;
    const ends = [...this.open.values()];
    this.open.clear();
    for (const e of ends) e.sessionEnded();
  }

  get size(): number {
    return this.open.size;
  }
}

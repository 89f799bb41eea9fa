// TerminalService: `skipper exec -it`. Attach takes the open (its first message), opens the
// terminal on the node's session (dispatch/open-terminal.ts: rules, node, audit) and relays it
// (dispatch/terminal-relay.ts) until the command exits or either side goes.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { AttachResponseSchema, type TerminalService } from "../../gen/skipper/v1/terminal_service_pb.js";
import { callInfo } from "../base/context.js";
import { invalid } from "../base/errors.js";
import { openTerminal } from "../dispatch/open-terminal.js";
import type { ServiceDeps } from "./deps.js";

/** TerminalService implementation. */
export function terminalService(deps: ServiceDeps): ServiceImpl<typeof TerminalService> {
  return {
    async *attach(requests, ctx) {
      const it = requests[Symbol.asyncIterator]();
      const first = await it.next();
      if (first.done || first.value.kind.case !== "open") throw invalid("a terminal opens with its first message, open", { field: "open" });
      const t = await openTerminal(deps, callInfo(ctx), first.value.kind.value);
      try {
        yield create(AttachResponseSchema, { kind: { case: "opened", value: { execId: t.execId, nodeId: t.nodeId } } });
        yield* t.relay.answers(it);
      } finally {
        await t.closed(t.relay.end).catch(() => undefined);
      }
    },
  };
}

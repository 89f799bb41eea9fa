// TerminalService: `skipper exec -it`. Attach takes the open (its first message), opens the
// terminal on the node's session (dispatch/open-terminal.ts: rules, node, slot, audit) and relays
// it (dispatch/terminal-relay.ts) until the command exits or either side goes. However the call
// ends, the terminal is closed with it (a client that left before its answers were read included),
// and it ends when the caller's credential does (dispatch/terminal-credential.ts).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { AttachResponseSchema, type TerminalService } from "../../gen/skipper/v1/terminal_service_pb.js";
import { callInfo } from "../base/context.js";
import { invalid, SkipperError } from "../base/errors.js";
import { openTerminal } from "../dispatch/open-terminal.js";
import { watchTerminalCredential } from "../dispatch/terminal-credential.js";
import type { ServiceDeps } from "./deps.js";

/** TerminalService implementation. */
export function terminalService(deps: ServiceDeps): ServiceImpl<typeof TerminalService> {
  return {
    async *attach(requests, ctx) {
      const it = requests[Symbol.asyncIterator]();
      const first = await it.next();
      if (first.done || first.value.kind.case !== "open") throw invalid("a terminal opens with its first message, open", { field: "open" });
      const call = callInfo(ctx);
      const t = await openTerminal(deps, call, first.value.kind.value);
      const unwatch = watchTerminalCredential(deps, call.principal, (why) => t.relay.abandon(why));
      try {
        yield create(AttachResponseSchema, { kind: { case: "opened", value: { execId: t.execId, nodeId: t.nodeId } } });
        yield* t.relay.answers(it);
      } finally {
        unwatch();
        // Nothing when the relay ended it already; else the client left before the relay started.
        t.relay.abandon(new SkipperError("UNAVAILABLE", "the client went"));
        await t.closed(t.relay.end).catch(() => undefined);
      }
    },
  };
}

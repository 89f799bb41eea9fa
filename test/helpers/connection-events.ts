// What a listener told of its connections (refused on arrival; held in line, let in, timed out,
// closed while waiting), for tests to wait on: startController({ connectionEvents: events.options }).
import type { ServeOptions } from "../../controller/server/listener.js";

export interface ConnectionEvents {
  options: Pick<ServeOptions, "onRefusedConnection" | "onWaitingConnection">;
  /** Each as "<event> <address>", in order: "held 127.0.0.3", "let-in 127.0.0.3", "refused:unvouched 127.0.0.4". */
  seen: string[];
  /** Resolves once "<event> <address>" has been seen `times` times in all. */
  until(event: string, address: string, times?: number): Promise<void>;
}

export function connectionEvents(): ConnectionEvents {
  const seen: string[] = [];
  let waiters: { check: () => boolean; resolve: () => void }[] = [];
  const note = (entry: string) => {
    seen.push(entry);
    waiters = waiters.filter((w) => (w.check() ? (w.resolve(), false) : true));
  };
  return {
    seen,
    options: {
      onRefusedConnection: (address, cap) => note(`refused:${cap} ${address}`),
      onWaitingConnection: (address, event) => note(`${event} ${address}`),
    },
    until(event, address, times = 1) {
      const entry = `${event} ${address}`;
      const check = () => seen.filter((e) => e === entry).length >= times;
      return new Promise((resolve) => (check() ? resolve() : waiters.push({ check, resolve })));
    },
  };
}

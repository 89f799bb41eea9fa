// The tenant page's logs view: pick services (none ticked: all), how many lines and since when,
// then Fetch (once) or Follow (ask again every 2 s for the lines after the last one shown, for
// at most 10 minutes, until Stop or the page is left: main.ts calls stop()). Each round asks
// every node the tenant runs on through a read_logs order, as `skipper logs` does; reading logs
// is an operator's right, and a refusal is shown as the API words it.
import type { Api } from "./api.js";
import { problemOf, transient } from "./api-problem.js";
import { h } from "./dom.js";
import { linesAfter, parseSince, type LogCursor } from "./log-lines.js";
import { LogOutput } from "./log-output.js";
import { ServicePicker } from "./service-picker.js";
import { ANSWER_WITHIN_MS, logTargets, pause, readNodeLogs, type LogTarget } from "./read-logs.js";

export interface LogsView {
  element: HTMLElement;
  /** Stops a fetch or follow under way (its pending orders are cancelled). */
  stop(): void;
}

const FOLLOW_EVERY_MS = 2000;
const FOLLOW_FOR_MS = 10 * 60_000;

interface Asked {
  services: string[];
  tailLines: number;
  since: Date | undefined;
  sinceText: string;
}

/** The logs view of one tenant; it keeps its state while the page around it is rendered again. */
export function logsView(api: Api, tenantId: string): LogsView {
  const picker = new ServicePicker();
  const tail = h("input", { type: "number", id: "logs-tail", min: "1", max: "5000", value: "100" }) as HTMLInputElement;
  const since = h("input", { type: "text", id: "logs-since", placeholder: "e.g. 10m", size: "8" }) as HTMLInputElement;
  const fetchButton = h("button", { type: "button", "data-testid": "logs-fetch", onclick: () => void run(false) }, "Fetch");
  const followButton = h(
    "button",
    { type: "button", "data-testid": "logs-follow", onclick: () => (running ? stop() : void run(true)) },
    "Follow",
  );
  const status = h(
    "p",
    { class: "muted", role: "status", "data-testid": "logs-status" },
    "Pick services (none ticked: all), then Fetch or Follow.",
  );
  const alert = h("p", { class: "error", role: "alert", "data-testid": "logs-alert", hidden: "" });
  const out = new LogOutput();
  let running: AbortController | undefined;

  const element = h(
    "div",
    { class: "logs", "data-testid": "logs" },
    h(
      "div",
      { class: "log-form" },
      "Services: ",
      picker.element,
      h("label", {}, "Tail ", tail),
      h("label", {}, "Since ", since),
      fetchButton,
      followButton,
    ),
    alert,
    status,
    out.element,
  );
  const showServices = (targets: LogTarget[]) => picker.show(targets.flatMap((t) => t.services));
  void logTargets(api, tenantId).then(showServices, () => {});
  const reader: Reader = { api, tenantId, out, showServices };

  function stop(): void {
    running?.abort();
  }

  async function run(follow: boolean): Promise<void> {
    stop();
    alert.hidden = true;
    let asked: Asked;
    try {
      asked = askedOf(picker, tail, since);
    } catch (e) {
      return showAlert(e instanceof Error ? e.message : String(e));
    }
    const ac = new AbortController();
    running = ac;
    fetchButton.toggleAttribute("disabled", true);
    followButton.textContent = "Stop";
    out.clear();
    status.textContent = "Asking the nodes…";
    const cursors = new Map<string, LogCursor | undefined>();
    const until = Date.now() + FOLLOW_FOR_MS;
    try {
      for (let blips = 0; ; ) {
        try {
          await round(reader, asked, cursors, ac.signal);
          alert.hidden = true;
          blips = 0;
          if (!follow) {
            status.textContent = `Fetched at ${new Date().toLocaleTimeString()}.`;
            break;
          }
        } catch (e) {
          // A blip (a restarted controller, a network change) is outlived, as the event stream does; a fetch tries 3 times.
          if (ac.signal.aborted || !transient(e) || (!follow && ++blips >= 3)) throw e;
          showAlert(`${problemOf(e)} (asking again in ${FOLLOW_EVERY_MS / 1000} s)`);
        }
        const at = new Date().toLocaleTimeString();
        if (Date.now() > until) {
          status.textContent = `Follow stopped after ${FOLLOW_FOR_MS / 60_000} minutes (last asked at ${at}); press Follow to go on.`;
          break;
        }
        if (follow) status.textContent = `Following: last asked at ${at}, asking again every ${FOLLOW_EVERY_MS / 1000} s.`;
        await pause(FOLLOW_EVERY_MS, ac.signal);
      }
    } catch (e) {
      const stopped = ac.signal.aborted;
      status.textContent = stopped ? "Stopped." : "";
      if (!stopped) showAlert(problemOf(e, "Reading logs needs the operator role (this credential's role cannot)."));
    } finally {
      if (running === ac) {
        running = undefined;
        fetchButton.toggleAttribute("disabled", false);
        followButton.textContent = "Follow";
      }
    }
  }

  function showAlert(text: string): void {
    alert.textContent = text;
    alert.hidden = false;
  }

  return { element, stop };
}

/** What a round of questions needs: the API, the tenant, and where answers and services are shown. */
interface Reader {
  api: Api;
  tenantId: string;
  out: LogOutput;
  showServices: (targets: LogTarget[]) => void;
}

// What the form asks for; throws what to tell the user when it cannot be asked.
function askedOf(picker: ServicePicker, tail: HTMLInputElement, since: HTMLInputElement): Asked {
  const tailLines = Number(tail.value);
  if (!Number.isInteger(tailLines) || tailLines < 1 || tailLines > 5000) throw new Error("Tail must be a whole number from 1 to 5000.");
  const sinceText = since.value.trim();
  return {
    services: picker.picked(),
    tailLines,
    since: sinceText ? new Date(Date.now() - parseSince(sinceText)) : undefined,
    sinceText,
  };
}

// One question to every node the tenant runs on; each node's box says what it answered.
async function round(reader: Reader, asked: Asked, cursors: Map<string, LogCursor | undefined>, signal: AbortSignal): Promise<void> {
  const targets = await logTargets(reader.api, reader.tenantId);
  if (signal.aborted) throw signal.reason;
  reader.showServices(targets);
  if (targets.length === 0) return reader.out.say(`Tenant ${reader.tenantId} runs on no node, so there are no logs to read.`);
  for (const t of targets) if (reader.out.count(t.nodeId) === 0) reader.out.note(t.nodeId, "asking…");
  // Every node's question ends before the round does (a refusal is the same for all of them); a
  // node whose question failed says so in its box, never "asking…" under the failure.
  const results = await Promise.allSettled(targets.map((t) => askNode(reader, t, asked, cursors, signal)));
  results.forEach((r, i) => {
    if (r.status === "rejected") {
      reader.out.note(targets[i]!.nodeId, signal.aborted ? "Stopped before it answered." : `Not read: ${problemOf(r.reason)}`, true);
    }
  });
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
}

// One node's question; its box says what it answered.
async function askNode(
  reader: Reader,
  t: LogTarget,
  asked: Asked,
  cursors: Map<string, LogCursor | undefined>,
  signal: AbortSignal,
): Promise<void> {
  const node = t.nodeId;
  if (t.offline) {
    const last = t.lastHeartbeat ? ` (last heartbeat ${t.lastHeartbeat.toLocaleString()})` : " (its agent has never sent a heartbeat)";
    return reader.out.note(node, `${node} is offline${last}: its logs cannot be read until its agent is back.`, true);
  }
  // Only the picked services this node runs: another node may run others.
  const services = t.services.length > 0 ? asked.services.filter((s) => t.services.includes(s)) : asked.services;
  if (asked.services.length > 0 && services.length === 0) return reader.out.note(node, `${node} runs none of the services picked.`);
  const cursor = cursors.get(node);
  const answer = await readNodeLogs(
    reader.api,
    { tenantId: reader.tenantId, nodeId: node, services, tailLines: asked.tailLines, since: cursor?.at ?? asked.since },
    signal,
  );
  if (answer.kind === "failed") return reader.out.note(node, `${answer.code}: ${answer.message}`, true);
  if (answer.kind === "no-answer")
    return reader.out.note(
      node,
      answer.cancelled
        ? `${node} did not take the order within ${ANSWER_WITHIN_MS / 1000} s; order ${answer.orderId} was cancelled.`
        : `${node} did not take the order within ${ANSWER_WITHIN_MS / 1000} s, and cancelling it failed: order ${answer.orderId} is still queued and may run when the node takes it.`,
      true,
    );
  const { fresh, cursor: next } = linesAfter(answer.lines, cursor);
  cursors.set(node, next);
  reader.out.append(node, fresh);
  const n = reader.out.count(node);
  const within = asked.sinceText ? ` in the last ${asked.sinceText}` : "";
  const which = services.length > 0 ? ` from ${services.join(", ")}` : "";
  reader.out.note(
    node,
    n === 0
      ? `No log lines${which}${within}: the containers printed nothing the engine kept.`
      : `${n} line(s)${which}${answer.truncated && !cursor ? ", the oldest cut to the tail asked for" : ""}.`,
  );
}

// The logs view's output: one box per node, holding its lines (time, container, text; stderr
// marked) and a sentence saying plainly what there is: how many lines, none, an offline node, a
// failed order. A follow appends rows; past MAX_ROWS the oldest go, so a long follow stays small.
import { h } from "./dom.js";
import type { ShownLine } from "./log-lines.js";

export const MAX_ROWS = 2000;

interface NodeBox {
  note: HTMLElement;
  table: HTMLElement;
  body: HTMLElement;
}

export class LogOutput {
  readonly element = h("div", { class: "log-output", "data-testid": "logs-output" });
  private readonly boxes = new Map<string, NodeBox>();

  /** Empties the output (a new fetch or follow). */
  clear(): void {
    this.boxes.clear();
    this.element.replaceChildren();
  }

  /** A sentence for the whole output, in place of node boxes (e.g. the tenant runs nowhere). */
  say(text: string): void {
    this.clear();
    this.element.append(h("p", { class: "muted", "data-testid": "logs-none" }, text));
  }

  /** Sets the node's sentence; `problem` shows it as an error. */
  note(nodeId: string, text: string, problem = false): void {
    const { note } = this.box(nodeId);
    note.className = problem ? "error" : "muted";
    note.textContent = text;
  }

  /** Appends lines to the node's box, oldest first, dropping the oldest rows past MAX_ROWS. */
  append(nodeId: string, lines: ShownLine[]): void {
    const { table, body } = this.box(nodeId);
    for (const l of lines) {
      body.append(
        h(
          "tr",
          { class: l.stream === "stderr" ? "stderr" : undefined },
          h("td", { class: "log-time" }, l.at ? l.at.toISOString() : "—"),
          h("td", { class: "log-container" }, l.container),
          h("td", { class: "log-text" }, l.text),
        ),
      );
    }
    while (body.childElementCount > MAX_ROWS) body.firstElementChild!.remove();
    table.hidden = body.childElementCount === 0;
  }

  /** How many lines the node's box holds. */
  count(nodeId: string): number {
    return this.box(nodeId).body.childElementCount;
  }

  private box(nodeId: string): NodeBox {
    let b = this.boxes.get(nodeId);
    if (!b) {
      const body = h("tbody", {});
      const table = h(
        "table",
        { class: "log-lines" },
        h("thead", {}, h("tr", {}, h("th", {}, "Time"), h("th", {}, "Container"), h("th", {}, "Line"))),
        body,
      );
      table.hidden = true;
      b = { note: h("p", { class: "muted" }), table, body };
      this.boxes.set(nodeId, b);
      this.element.append(h("div", { class: "log-node", "data-log-node": nodeId }, h("h3", {}, nodeId), b.note, table));
    }
    return b;
  }
}

// The logs view's choice of services: a box per compose service the tenant's nodes reported
// (none ticked: all of them). Listing them again keeps what was ticked.
import { h } from "./dom.js";

export class ServicePicker {
  readonly element = h("span", { class: "log-services", "data-testid": "logs-services" }, h("span", { class: "muted" }, "…"));

  /** Shows these services (sorted, unique); what was ticked stays ticked. */
  show(services: string[]): void {
    const names = [...new Set(services)].sort();
    const shown = [...this.element.querySelectorAll("input")].map((i) => i.value);
    if (shown.length > 0 && names.join() === shown.join()) return;
    const ticked = new Set(this.picked());
    this.element.replaceChildren(
      ...(names.length === 0 ? [h("span", { class: "muted" }, "none reported yet (all)")] : []),
      ...names.map((s) => h("label", {}, h("input", { type: "checkbox", value: s, ...(ticked.has(s) ? { checked: "" } : {}) }), ` ${s}`)),
    );
  }

  /** The services ticked; none means all. */
  picked(): string[] {
    return [...this.element.querySelectorAll<HTMLInputElement>("input:checked")].map((i) => i.value);
  }
}

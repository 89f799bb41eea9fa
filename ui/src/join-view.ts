// The fleet page's "Join a host": a new single-use enrollment token and the one line a new host
// runs with it (common/join-line.ts, the line `skipper node join-command` prints), for a host that
// reaches the controller at this page's origin. Kept across the page's renders (main.ts), so the
// line stays until the page is left. Making a token is an admin's call: others see the refusal.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import { joinLine } from "../../common/join-line.js";
import type { Api } from "./api.js";
import { h } from "./dom.js";

/** The button and, once pressed, the line (or why there is none). */
export function joinView(api: Api): HTMLElement {
  const out = h("div", { "data-testid": "join-output" });
  const say = (...nodes: HTMLElement[]) => out.replaceChildren(...nodes);
  async function make(): Promise<void> {
    say(h("p", { class: "muted" }, "Making an enrollment token…"));
    try {
      const about = await api.agentBundles.getAgentBundle({});
      if (!about.manifest || !about.tlsPin) {
        say(h("p", { class: "error", role: "alert" }, "This controller serves no agent bundle over TLS: start it with --agent-bundle."));
        return;
      }
      const made = await api.enrollment.createEnrollmentToken({ uses: 1, description: "dashboard: join a host" });
      const expires = made.enrollmentToken?.expiresAt;
      const until = expires ? timestampDate(expires).toLocaleString() : "it expires";
      say(
        h("p", {}, `On the new host, as root (it needs curl and Node.js 20+; the token enrolls one host, until ${until}):`),
        h("pre", { "data-testid": "join-line" }, joinLine({ url: location.origin, pin: about.tlsPin, token: made.token })),
      );
    } catch (e) {
      say(h("p", { class: "error", role: "alert" }, e instanceof ConnectError ? e.rawMessage : String(e)));
    }
  }
  return h(
    "div",
    { class: "join" },
    h("button", { type: "button", "data-testid": "join-host", onclick: () => void make() }, "Join a host"),
    out,
  );
}

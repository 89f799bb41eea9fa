// The dashboard: sign in with an API key (or the admin token), then the fleet, a tenant or a node
// by the URL's hash (#/, #/tenants/ID, #/nodes/ID). One WatchEvents stream keeps the page current:
// each event renders the page again (at most a few times a second). The credential stays in this
// tab's sessionStorage only.
import { Code, ConnectError } from "@connectrpc/connect";
import { ActorKind, Role } from "../../gen/skipper/v1/access_pb.js";
import { connect, type Api } from "./api.js";
import { h } from "./dom.js";
import { nodePage, overview, tenantPage } from "./pages.js";

const KEY = "skipper.credential";
const app = document.getElementById("app")!;
const live = document.getElementById("live")!;
const who = document.getElementById("who")!;
const signOut = document.getElementById("sign-out") as HTMLButtonElement;

let api: Api | undefined;
let watching: AbortController | undefined;
let rendering = Promise.resolve();
let again = false;

function signInForm(problem = ""): void {
  const input = h("input", { type: "password", id: "credential", autocomplete: "off", placeholder: "skk_… or the admin token" });
  const form = h(
    "form",
    { class: "sign-in", onsubmit: (e) => void submit(e, (input as HTMLInputElement).value.trim()) },
    h("h1", {}, "Sign in"),
    h("label", { for: "credential" }, "API key"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    problem ? h("p", { class: "error", role: "alert" }, problem) : undefined,
  );
  app.replaceChildren(form);
  (input as HTMLInputElement).focus();
}

async function submit(e: Event, credential: string): Promise<void> {
  e.preventDefault();
  if (credential === "") return signInForm("Enter an API key.");
  if (!(await start(credential))) return;
  sessionStorage.setItem(KEY, credential);
}

/** Checks the credential and starts the session; false (with the form shown again) when refused. */
async function start(credential: string): Promise<boolean> {
  const candidate = connect(credential);
  try {
    const me = await candidate.access.whoAmI({});
    if (me.actor?.kind === ActorKind.ANONYMOUS || me.actor === undefined) throw new Error("not signed in");
    who.textContent = `${me.actor.name || me.actor.id || ActorKind[me.actor.kind]} (${Role[me.actor.role] ?? "?"})`;
  } catch (e) {
    signInForm(`That credential was refused: ${e instanceof ConnectError ? e.rawMessage : String(e)}`);
    return false;
  }
  api = candidate;
  signOut.hidden = false;
  watch();
  render();
  return true;
}

/** Renders the page the hash names; a render asked for while one runs happens once after it. */
function render(): void {
  if (!api) return;
  const current = api;
  if (again) return;
  again = true;
  rendering = rendering.then(async () => {
    again = false;
    const [, kind, id] = /^#\/(tenants|nodes)\/(.+)$/.exec(location.hash) ?? [];
    try {
      const page =
        kind === "tenants"
          ? await tenantPage(current, decodeURIComponent(id!))
          : kind === "nodes"
            ? await nodePage(current, decodeURIComponent(id!))
            : await overview(current);
      if (api === current) app.replaceChildren(page);
    } catch (e) {
      if (api === current)
        app.replaceChildren(h("p", { class: "error", role: "alert" }, e instanceof ConnectError ? e.rawMessage : String(e)));
    }
  });
}

/** Follows the event stream; reconnects after a break (a restarted controller, a network blip). */
function watch(): void {
  watching?.abort();
  const ac = new AbortController();
  watching = ac;
  void (async () => {
    while (!ac.signal.aborted && api) {
      try {
        let first = true;
        for await (const m of api.events.watchEvents({}, { signal: ac.signal })) {
          live.textContent = "live";
          live.classList.add("on");
          // (Re)connected: what changed while the stream was down is on the page at once.
          if (m.event || first) render();
          first = false;
        }
      } catch (e) {
        // A credential revoked or expired meanwhile: back to the sign-in form.
        if (e instanceof ConnectError && (e.code === Code.Unauthenticated || e.code === Code.PermissionDenied)) {
          sessionStorage.removeItem(KEY);
          api = undefined;
          signOut.hidden = true;
          who.textContent = "";
          signInForm(`Signed out: ${e.rawMessage}`);
          return;
        }
        // Broken otherwise: say so, wait a moment, and connect again.
      }
      live.textContent = "offline";
      live.classList.remove("on");
      if (!ac.signal.aborted) await new Promise((r) => setTimeout(r, 2000));
    }
  })();
}

signOut.addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  watching?.abort();
  api = undefined;
  who.textContent = "";
  signOut.hidden = true;
  signInForm();
});
window.addEventListener("hashchange", render);

const saved = sessionStorage.getItem(KEY);
if (saved) void start(saved);
else signInForm();

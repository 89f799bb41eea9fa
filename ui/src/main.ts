// The dashboard: sign in with an API key (or the admin token), then the fleet, a tenant or a node
// by the URL's hash (#/, #/tenants/ID, #/nodes/ID), the deliveries (#/deliveries, #/deliveries/ID). One WatchEvents stream keeps the page current:
// each event renders the page again (at most a few times a second). A tenant's logs view is kept
// across those renders and stopped when its page is left. The credential stays in this tab's
// sessionStorage only.
import { Code, ConnectError } from "@connectrpc/connect";
import { ActorKind, Role } from "../../gen/skipper/v1/access_pb.js";
import { connect, type Api } from "./api.js";
import { h } from "./dom.js";
import { joinView } from "./join-view.js";
import { logsView, type LogsView } from "./logs-view.js";
import { type Caller, deliveriesPage, deliveryPage, nodePage, overview, tenantPage } from "./pages.js";

const KEY = "skipper.credential";
const app = document.getElementById("app")!;
const live = document.getElementById("live")!;
const who = document.getElementById("who")!;
const signOut = document.getElementById("sign-out") as HTMLButtonElement;

let api: Api | undefined;
/** What the signed-in caller may do (the delivery view's decisions). */
let caller: Caller = { operates: false };
let watching: AbortController | undefined;
let rendering = Promise.resolve();
let again = false;
// When the last render started, and the render an event has scheduled (renderSoon).
let lastRender = 0;
let soon: ReturnType<typeof setTimeout> | undefined;
const RENDER_EVERY_MS = 1000;
/** The fleet page's "Join a host" view, kept across its renders (the line it shows stays). */
let join: { api: Api; element: HTMLElement } | undefined;
/** The logs view of the tenant page shown, kept while that page is. */
let logs: { api: Api; tenantId: string; view: LogsView } | undefined;

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
    // OPERATE over every tenant: environments are the fleet's, so a key scoped to some tenants may not decide.
    const unscoped = !me.scope || (me.scope.tenantIds.length === 0 && me.scope.tenantSelector === "");
    caller = { operates: (me.actor.role === Role.ADMIN || me.actor.role === Role.OPERATOR) && unscoped };
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
    lastRender = Date.now();
    const { kind, id } = route();
    try {
      const view = kind === "tenants" ? logsOf(current, id!) : undefined;
      const page =
        kind === "tenants" && view
          ? await tenantPage(current, id!, view.element)
          : kind === "nodes"
            ? await nodePage(current, id!)
            : kind === "deliveries"
              ? await (id ? deliveryPage(current, id, caller, render) : deliveriesPage(current))
              : await overview(current, joinOf(current));
      if (api !== current) return;
      // Moving the logs view into the new page blurs what had focus in it (a field being typed in).
      const focused = document.activeElement;
      app.replaceChildren(page);
      if (focused instanceof HTMLElement && view?.element.contains(focused)) focused.focus({ preventScroll: true });
    } catch (e) {
      if (api === current)
        app.replaceChildren(h("p", { class: "error", role: "alert" }, e instanceof ConnectError ? e.rawMessage : String(e)));
    }
  });
}

/**
 * A render for an event: at most one per RENDER_EVERY_MS. A rollout across a large fleet sends
 * events by the hundred each second, and each render reads the whole page from the API again:
 * without this an open dashboard would keep the controller busy redrawing.
 */
function renderSoon(): void {
  if (soon) return;
  const wait = Math.max(0, lastRender + RENDER_EVERY_MS - Date.now());
  soon = setTimeout(() => {
    soon = undefined;
    render();
  }, wait);
}

/** The page the URL's hash names. */
function route(): { kind?: "tenants" | "nodes" | "deliveries"; id?: string } {
  if (location.hash === "#/deliveries") return { kind: "deliveries" };
  const [, kind, id] = /^#\/(tenants|nodes|deliveries)\/(.+)$/.exec(location.hash) ?? [];
  return kind ? { kind: kind as "tenants" | "nodes" | "deliveries", id: decodeURIComponent(id!) } : {};
}

/** The "Join a host" view of this session. */
function joinOf(current: Api): HTMLElement {
  if (join?.api !== current) join = { api: current, element: joinView(current) };
  return join.element;
}

/** The tenant's logs view: the one already shown, or a new one. */
function logsOf(current: Api, tenantId: string): LogsView {
  if (logs?.api !== current || logs.tenantId !== tenantId) {
    leaveLogs();
    logs = { api: current, tenantId, view: logsView(current, tenantId) };
  }
  return logs.view;
}

/** Stops the logs view (a follow under way) when its tenant's page is left or the session ends. */
function leaveLogs(): void {
  logs?.view.stop();
  logs = undefined;
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
          if (first) render();
          else if (m.event) renderSoon();
          first = false;
        }
      } catch (e) {
        // A credential revoked or expired meanwhile: back to the sign-in form.
        if (e instanceof ConnectError && (e.code === Code.Unauthenticated || e.code === Code.PermissionDenied)) {
          sessionStorage.removeItem(KEY);
          leaveLogs();
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
  leaveLogs();
  api = undefined;
  who.textContent = "";
  signOut.hidden = true;
  signInForm();
});
window.addEventListener("hashchange", () => {
  if (logs && (route().kind !== "tenants" || route().id !== logs.tenantId)) leaveLogs();
  render();
});

const saved = sessionStorage.getItem(KEY);
if (saved) void start(saved);
else signInForm();

// `skipper apply`: what each manifest changes (create, update with the fields that differ, or
// unchanged), shown before anything is written, then the writes in dependency order. Repeating an
// apply changes nothing. A secret's values are write-only (the API never returns them), so a
// secret that carries values is sent and the controller keeps those it already holds: the answer
// says whether anything changed. A tenant whose compose file names secrets created in the same
// apply is created bare first (the secrets name their tenant), and given its spec once they exist.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ResourceSpecSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { carriesValues, documentChanges, type FieldChange } from "../common/desired-diff.js";
import type { Clients } from "./connection.js";
import { CliError, describeError } from "./errors.js";
import { renderChanges } from "./desired-diff.js";
import type { Manifest } from "./manifests.js";

export type Action = "create" | "update" | "unchanged" | "send-values";

/** What applying one manifest does. */
export interface Step {
  manifest: Manifest;
  action: Action;
  changes: FieldChange[];
  /** The stored resource, when there is one. */
  current?: Resource;
  /** Created bare first, given its spec after the secrets it names (see above). */
  bare?: boolean;
}

/** Reads what is stored for each manifest and says what applying it would do. */
export async function planApply(clients: Clients, manifests: Manifest[]): Promise<Step[]> {
  const steps: Step[] = [];
  for (const m of manifests) steps.push(stepFor(m, await stored(clients, m)));
  const newSecrets = new Set(steps.filter((s) => s.action === "create" && s.manifest.type === "secret").map((s) => s.manifest.id));
  for (const s of steps) if (s.action === "create" && namedSecrets(s.manifest.resource).some((id) => newSecrets.has(id))) s.bare = true;
  return steps;
}

/** What applying `m` over `current` (absent: not stored) does. Pure. */
export function stepFor(m: Manifest, current: Resource | undefined): Step {
  if (!current) return { manifest: m, action: "create", changes: [] };
  const changes = documentChanges(m, current);
  const action: Action = changes.length > 0 ? "update" : carriesValues(m) ? "send-values" : "unchanged";
  return { manifest: m, action, changes, current };
}

/** The plan as lines: one per resource, its field changes under it. */
export function renderPlan(steps: Step[]): string[] {
  const lines: string[] = [];
  for (const s of steps) {
    const name = `${s.manifest.type}/${s.manifest.id}`;
    switch (s.action) {
      case "create":
        lines.push(`${name}: create${s.bare ? " (bare first: the secrets it names are created after it)" : ""}`);
        break;
      case "update":
        lines.push(`${name}: update`, ...renderChanges(s.changes));
        break;
      case "send-values":
        lines.push(`${name}: send values (write-only: the controller keeps those it already holds)`);
        break;
      case "unchanged":
        lines.push(`${name}: unchanged`);
        break;
    }
  }
  return lines;
}

/** What the writes did, per resource. */
export interface Outcome {
  name: string;
  result: "created" | "updated" | "unchanged";
}

/** Writes the plan, in its order; reports each outcome as it happens. */
export async function executeApply(clients: Clients, steps: Step[], report: (o: Outcome) => void): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const done = (s: Step, result: Outcome["result"]) => {
    const o = { name: `${s.manifest.type}/${s.manifest.id}`, result };
    outcomes.push(o);
    report(o);
  };
  for (const s of steps) {
    const m = s.manifest;
    await naming(s, outcomes, async () => {
      if (s.action === "unchanged") {
        done(s, "unchanged");
      } else if (s.action === "create") {
        const resource = s.bare ? bare(m.resource) : m.resource;
        await clients.resources.createResource({ resourceType: m.type, resource });
        if (!s.bare) done(s, "created");
      } else {
        const after = await update(clients, m);
        const same = after.metadata?.resourceVersion === s.current?.metadata?.resourceVersion;
        done(s, same ? "unchanged" : "updated");
      }
    });
  }
  for (const s of steps.filter((x) => x.bare)) {
    await naming(s, outcomes, async () => {
      await update(clients, s.manifest);
      done(s, "created");
    });
  }
  return outcomes;
}

// A refused write names its resource and file, and what was written before it.
async function naming(s: Step, outcomes: Outcome[], write: () => Promise<void>): Promise<void> {
  try {
    await write();
  } catch (e) {
    const d = describeError(e);
    const written = outcomes.filter((o) => o.result !== "unchanged").map((o) => `${o.name} ${o.result}`);
    throw new CliError(`${s.manifest.type}/${s.manifest.id} (${s.manifest.source}): ${d.message}`, {
      hint: [d.hint, written.length > 0 ? `written before it: ${written.join(", ")}` : "nothing was written"].filter(Boolean).join("; "),
    });
  }
}

async function update(clients: Clients, m: Manifest): Promise<Resource> {
  const paths = ["desired_state", ...(m.labelsGiven ? ["labels"] : []), ...(m.annotationsGiven ? ["annotations"] : [])];
  const res = await clients.resources.updateResource({
    resourceType: m.type,
    id: m.id,
    desiredState: m.resource.desiredState,
    labels: m.resource.metadata?.labels ?? {},
    annotations: m.resource.metadata?.annotations ?? {},
    updateMask: { paths },
  });
  return res.resource!;
}

async function stored(clients: Clients, m: Manifest): Promise<Resource | undefined> {
  try {
    return (await clients.resources.getResource({ resourceType: m.type, id: m.id })).resource;
  } catch (e) {
    if (e instanceof ConnectError && e.code === Code.NotFound) return undefined;
    throw e;
  }
}

// The secrets a tenant's own compose file names (services name theirs, and come after secrets).
function namedSecrets(r: Resource): string[] {
  if (r.desiredState?.kind.case !== "tenant") return [];
  const compose = r.desiredState.kind.value.compose;
  return [...Object.values(compose?.secretEnv ?? {}), ...Object.values(compose?.secretFiles ?? {})].map((ref) => ref.secretId);
}

// A tenant with nothing to deploy yet: its display name, labels and annotations.
function bare(r: Resource): Resource {
  const displayName = r.desiredState?.kind.case === "tenant" ? r.desiredState.kind.value.displayName : "";
  return { ...r, desiredState: create(ResourceSpecSchema, { kind: { case: "tenant", value: { displayName } } }) };
}

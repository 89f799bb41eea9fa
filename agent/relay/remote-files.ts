// What a compose project would need from the relay's own disk on an SSH node. Compose runs on the
// relay and resolves relative paths there, but the node's engine mounts a bind source from the
// node's disk: a relative bind mount, a file-based secret or config, or one of the order's
// secret_files (written beside the compose file on the relay) would mount a path that is not on
// the node, or worse, one that is and holds something else. Such projects are refused on SSH
// nodes rather than synced: absolute paths, named volumes, images, builds (their context is sent
// through the API) and environment files (read by Compose) work as they do on an agent's host.
import { parse } from "yaml";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";

/** One reason per path the project would take from the relay's disk; empty when none. */
export function relayDiskPaths(order: WorkOrder): string[] {
  const project = order.desiredState?.composeProject;
  if (!project) return [];
  const out = Object.keys(project.secretFiles).map((name) => `secret_files.${name} (secret files are written on the relay)`);
  let doc: unknown;
  try {
    doc = parse(project.composeFile, { maxAliasCount: 1000 });
  } catch {
    return out; // the executor reports COMPOSE_INVALID in its own words
  }
  const root = asRecord(doc);
  for (const [name, svc] of Object.entries(asRecord(root.services))) {
    const volumes = asRecord(svc).volumes;
    if (!Array.isArray(volumes)) continue;
    volumes.forEach((v, i) => {
      const source = typeof v === "string" ? shortSource(v) : bindSource(asRecord(v));
      if (source !== undefined && isRelative(source)) out.push(`services.${name}.volumes[${i}] (${source})`);
    });
  }
  for (const kind of ["secrets", "configs"] as const) {
    for (const [name, def] of Object.entries(asRecord(root[kind]))) {
      const file = asRecord(def).file;
      if (typeof file === "string" && isRelative(file)) out.push(`${kind}.${name}.file (${file})`);
    }
  }
  return out;
}

// "src:dst[:mode]": a source that is a path (not a volume name).
function shortSource(v: string): string | undefined {
  const parts = v.split(":");
  if (parts.length < 2) return undefined;
  const src = parts[0] ?? "";
  return src.startsWith(".") || src.startsWith("~") || src.includes("/") ? src : undefined;
}

function bindSource(v: Record<string, unknown>): string | undefined {
  return v.type === "bind" && typeof v.source === "string" ? v.source : undefined;
}

function isRelative(path: string): boolean {
  return !path.startsWith("/") && !path.startsWith("$");
}

function asRecord(v: unknown): Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

// Reading Compose: what its error output means (the engine down, a file rejected, a line to
// report) and what a compose file names (its services, their images), without running it.
import { parse } from "yaml";

// What the CLIs print when they cannot reach the engine.
export const ENGINE_DOWN =
  /Cannot connect to the Docker daemon|Couldn't connect to Docker daemon|error during connect|Is the docker daemon running|connection refused.*docker\.sock/i;

/**
 * What Compose said is wrong with a file, as one line: its lines joined, without the staging
 * directory's path and with the "in <file>, line L, column C" lines of Compose v1 turned into one
 * location, so the headline says what and where ("expected ',' or ']' … (line 3, column 12)"),
 * not the last line of a traceback.
 */
export function composeComplaint(stderr: string, staging: string): string {
  let where = "";
  const said: string[] = [];
  for (const raw of stderr.split("\n")) {
    const line = raw.split(`${staging}/`).join("").trim();
    if (line === "") continue;
    const at = /^in "[^"]*", (line \d+, column \d+)$/.exec(line);
    if (at) where ||= at[1]!;
    else said.push(line.replace(/^yaml\.\w+\.\w+Error: /, ""));
  }
  const text = `${said.join("; ")}${where ? ` (${where})` : ""}`;
  return text.length > 500 ? `${text.slice(0, 497)}...` : text;
}

/** The last non-empty line of a command's output. */
export function lastLine(s: string): string {
  const lines = s
    .trim()
    .split("\n")
    .filter((l) => l.trim() !== "");
  return lines[lines.length - 1] ?? "";
}

/**
 * The services `up` starts, read from the file itself: the keys of `services` without a profile.
 * Undefined when the file is not plain enough to tell (Compose's own check then runs first).
 */
export function servicesInFile(composeFile: string): string[] | undefined {
  let doc: unknown;
  try {
    doc = parse(composeFile);
  } catch {
    return undefined;
  }
  const services = (doc as { services?: unknown } | null)?.services;
  if (typeof services !== "object" || services === null || Array.isArray(services)) return undefined;
  const out: string[] = [];
  for (const [name, svc] of Object.entries(services as Record<string, unknown>)) {
    if (typeof svc !== "object" || svc === null || Array.isArray(svc)) return undefined;
    const profiles = (svc as { profiles?: unknown }).profiles;
    if (Array.isArray(profiles) && profiles.length > 0) continue;
    out.push(name);
  }
  return out.length > 0 ? out.sort() : undefined;
}

/** Each service's image as the compose file writes it (variables unresolved), for naming a failed pull. */
export function imagesOf(composeFile: string): Map<string, string> {
  const out = new Map<string, string>();
  try {
    const doc = parse(composeFile) as { services?: Record<string, { image?: unknown }> } | null;
    for (const [name, svc] of Object.entries(doc?.services ?? {})) if (typeof svc?.image === "string") out.set(name, svc.image);
  } catch {
    // Compose accepted the file; a file this parser reads differently names no image, that is all.
  }
  return out;
}

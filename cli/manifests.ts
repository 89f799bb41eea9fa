// Manifests for `skipper apply` and `skipper delete`: the texts of files, directories or stdin,
// parsed into resource documents by the code the controller's Git sync shares
// (common/manifest-documents.ts: YAML or JSON, one or many per file, mapped to the canonical form
// as the REST routes map them). A mistake is found, with its file and document, before anything is
// sent.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { isManifestError, isManifestFile, type Manifest, parseManifestDocuments } from "../common/manifest-documents.js";
import { CliError } from "./errors.js";

export type { Manifest } from "../common/manifest-documents.js";

/** The texts behind `paths` ("-" is stdin; a directory gives its .yaml, .yml and .json files, sorted). */
export async function readSources(paths: string[], stdin: () => Promise<string>): Promise<{ source: string; text: string }[]> {
  if (paths.length === 0) throw new CliError("no manifest given", { hint: "pass -f FILE, -f DIR or -f - (stdin)" });
  const out: { source: string; text: string }[] = [];
  for (const p of paths) {
    if (p === "-") {
      out.push({ source: "stdin", text: await stdin() });
      continue;
    }
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch (e) {
      throw new CliError(`cannot read ${p}: ${(e as Error).message}`);
    }
    const files = isDir
      ? readdirSync(p)
          .filter(isManifestFile)
          .sort()
          .map((f) => join(p, f))
      : [p];
    if (isDir && files.length === 0) throw new CliError(`${p} holds no .yaml, .yml or .json file`);
    for (const f of files) out.push({ source: f, text: readFileSync(f, "utf8") });
  }
  return out;
}

/** Every resource document in `sources`, checked, in apply order (see APPLY_ORDER); a bad one is a CliError naming it. */
export function parseManifests(sources: { source: string; text: string }[]): Manifest[] {
  try {
    return parseManifestDocuments(sources);
  } catch (e) {
    if (isManifestError(e)) throw new CliError(e.message, e.hint ? { hint: e.hint } : {});
    throw e;
  }
}

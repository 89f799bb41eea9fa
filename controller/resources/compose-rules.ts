// A tenant's own compose file, checked when the tenant is written: it must be YAML (or JSON) whose
// top level is a mapping, with `services` (when present) a mapping, and each service's literal
// `image` an image reference (common/image-reference.ts). That is what Compose would refuse on
// every node anyway (COMPOSE_INVALID, "invalid reference format"); refusing it here says where
// the problem is and stores nothing. What only Compose knows (keys, interpolation: an image with
// `${...}` is known on the node only) stays the agent's.
import { isMap, isScalar, LineCounter, parseDocument, type YAMLMap } from "yaml";
import { invalid } from "../base/errors.js";
import { imageReferenceProblem } from "../../common/image-reference.js";

const FIELD = "desired_state.tenant.compose.compose_file";
const MAX_BYTES = 512 * 1024;

/** Checks a tenant's compose file text; "" (no file: the project is rendered from services) passes. */
export function checkComposeFile(text: string): void {
  if (text === "") return;
  if (Buffer.byteLength(text) > MAX_BYTES) fail(`is larger than ${MAX_BYTES / 1024} KiB`);
  const lines = new LineCounter();
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true, lineCounter: lines });
  const error = doc.errors[0];
  if (error) {
    // The parser's message names the line and column: "… at line 4, column 1:".
    fail(`is not valid YAML: ${firstLine(error.message).replace(/:$/, "")}`, { line: error.linePos?.[0]?.line ?? 0 });
  }
  if (!isMap(doc.contents)) fail("must be a mapping (with a 'services' key) at the top level");
  const services = doc.contents.get("services", true);
  if (services !== undefined && services !== null && !isMap(services) && !(isScalar(services) && services.value === null)) {
    fail("must hold a mapping of services under 'services'");
  }
  if (isMap(services)) checkImages(services, lines);
}

// Each service's literal image is a reference; interpolated ones (`$`) are the node's to resolve.
function checkImages(services: YAMLMap, lines: LineCounter): void {
  for (const item of services.items) {
    const name = isScalar(item.key) ? String(item.key.value) : "";
    if (!isMap(item.value)) continue;
    const image = item.value.get("image", true);
    if (!isScalar(image) || typeof image.value !== "string" || image.value.includes("$")) continue;
    const problem = imageReferenceProblem(image.value);
    if (problem) {
      const path = `services.${name}.image`;
      fail(`${path} ${JSON.stringify(image.value.slice(0, 256))} ${problem}`, {
        path,
        line: image.range ? lines.linePos(image.range[0]).line : 0,
      });
    }
  }
}

function firstLine(s: string): string {
  return s.split("\n")[0] ?? s;
}

function fail(problem: string, extra: Record<string, number | string> = {}): never {
  throw invalid(`${FIELD} ${problem}`, { field: FIELD, ...extra });
}

/** The services a compose file defines (none when it does not parse). */
export function composeServiceNames(composeFile: string): Set<string> {
  const doc = parseDocument(composeFile);
  const services = doc.errors.length > 0 ? undefined : doc.get("services", true);
  return new Set(isMap(services) ? services.items.map((i) => String((i.key as { value?: unknown })?.value ?? i.key)) : []);
}

// Fails when program code grows past what reads without scrolling: a function over 120 lines or
// a file over 500 lines. Program code is common/ controller/ agent/ cli/ ui/ bench/ scripts/,
// without tests (*.test.ts) and generated code (gen/). `npm run lint:sizes`.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseSync } from "@swc/core";

const MAX_FUNCTION_LINES = 120;
const MAX_FILE_LINES = 500;
const ROOTS = ["common", "controller", "agent", "cli", "ui", "bench", "scripts"];
const SKIP_DIRS = new Set(["node_modules", "gen", "dist"]);
const repo = fileURLToPath(new URL("..", import.meta.url));

/** Every program source file under the roots, as paths relative to the repository. */
function programFiles() {
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name) && !entry.name.startsWith(".")) walk(path);
      } else if (/\.(ts|mjs)$/.test(entry.name) && !entry.name.endsWith(".test.ts") && !entry.name.endsWith(".d.ts")) {
        files.push(relative(repo, path));
      }
    }
  };
  for (const root of ROOTS) walk(join(repo, root));
  return files.sort();
}

/** Line (1-based) of each byte offset: swc spans count UTF-8 bytes from 1. */
function lineIndex(text) {
  const bytes = Buffer.from(text, "utf8");
  const starts = [0];
  for (let i = 0; i < bytes.length; i++) if (bytes[i] === 0x0a) starts.push(i + 1);
  return (offset) => {
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo + 1;
  };
}

const keyName = (key) => key?.value ?? key?.name?.value ?? (key?.type === "Computed" ? "[computed]" : undefined);

const METHODS = new Set(["ClassMethod", "PrivateMethod", "Constructor", "MethodProperty", "GetterProperty", "SetterProperty"]);

/** The spans and names of one module's functions that have a body; a nameless one takes the name it is bound to. */
function functionsOf(module) {
  const found = [];
  const visit = (node, bound) => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item, bound);
      return;
    }
    if (node === null || typeof node !== "object") return;
    const type = node.type;
    if ((type === "FunctionDeclaration" || type === "FunctionExpression") && node.body) {
      found.push([node.span, node.identifier?.value ?? bound ?? "(anonymous)"]);
    } else if (type === "ArrowFunctionExpression") {
      found.push([node.span, bound ?? "(arrow)"]);
    } else if (METHODS.has(type) && (node.function?.body ?? node.body)) {
      found.push([node.span, type === "Constructor" ? "constructor" : (keyName(node.key) ?? "(method)")]);
    }
    // The name a function expression below takes: the variable, property or member it is assigned to.
    const names = {
      VariableDeclarator: ["init", node.id?.value],
      KeyValueProperty: ["value", keyName(node.key)],
      ClassProperty: ["value", keyName(node.key)],
      AssignmentExpression: ["right", node.left?.property?.value ?? node.left?.value],
    };
    const [field, name] = names[type] ?? [];
    for (const [key, value] of Object.entries(node)) if (key !== "span") visit(value, key === field ? name : undefined);
  };
  visit(module.body, undefined);
  return found;
}

/** Offenders of one file, each "file:line name N lines". */
function offendersIn(file) {
  const text = readFileSync(join(repo, file), "utf8");
  const offenders = [];
  const fileLines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
  if (fileLines > MAX_FILE_LINES) offenders.push({ lines: fileLines, text: `${file}:1 (file) ${fileLines} lines` });
  const module = parseSync(text, { syntax: "typescript", target: "es2022", comments: false });
  const lineOf = lineIndex(text);
  // Spans are offsets into one source map shared by every parse; the module's own start anchors them.
  const base = module.span.start - firstTokenOffset(text);
  for (const [span, name] of functionsOf(module)) {
    const first = lineOf(span.start - base);
    const last = lineOf(span.end - base - 1);
    const lines = last - first + 1;
    if (lines > MAX_FUNCTION_LINES) offenders.push({ lines, text: `${file}:${first} ${name} ${lines} lines` });
  }
  return offenders;
}

/** Byte offset (1-based, as swc counts) of the first token, past comments and blank space. */
function firstTokenOffset(text) {
  const code = text.replace(/^(?:\s+|\/\/[^\n]*|\/\*[\s\S]*?\*\/|#![^\n]*)*/, "");
  return Buffer.byteLength(text.slice(0, text.length - code.length), "utf8") + 1;
}

const offenders = programFiles().flatMap(offendersIn);
for (const offender of offenders) console.error(offender.text);
if (offenders.length > 0) {
  console.error(
    `check-sizes: ${offenders.length} over the limits (a function over ${MAX_FUNCTION_LINES} lines, a file over ${MAX_FILE_LINES})`,
  );
  process.exit(1);
}

// The README's shell examples as data: every ```sh (or ```bash) block of README.md, in README
// order, with the line its opening fence is on and what a marker on the line before it says:
//
//   <!-- readme-test: skip: <reason> -->  the block is not run; the test lists it with the reason
//   <!-- readme-test: cleanup -->          the block runs in its place, and also, last, when an
//                                          earlier block failed (it takes down what that started)
//
// A marker is the last non-blank line before the fence. A marker the parser does not understand,
// or one not followed by a shell block, is an error: a typo must not run or skip a block quietly.

/** One shell block of the README. */
export interface ReadmeBlock {
  /** 1-based position among the README's shell blocks. */
  index: number;
  /** 1-based line of the opening fence in the README. */
  line: number;
  /** The block's text, without the fences and without the indentation of the opening fence. */
  text: string;
  /** Why the block is not run, when its marker says so. */
  skip?: string;
  /** Whether the block also runs after an earlier block failed. */
  cleanup: boolean;
}

const SHELL_LANGUAGES = new Set(["sh", "bash", "shell"]);
const FENCE = /^( *)(`{3,}|~{3,})\s*([^\s`]*)/;
const MARKER = /^\s*<!--\s*readme-test:\s*(.*?)\s*-->\s*$/;

/** Parses a marker's directive (the text after `readme-test:`); throws on anything else. */
function directive(text: string, line: number): { skip?: string; cleanup: boolean } {
  const skip = /^skip:\s*(\S.*)$/.exec(text);
  if (skip) return { skip: skip[1], cleanup: false };
  if (text === "cleanup") return { cleanup: true };
  throw new Error(`README.md:${line}: unknown readme-test marker "${text}" (expected "skip: <reason>" or "cleanup")`);
}

/** The shell blocks of a Markdown text, in order. */
export function readmeBlocks(markdown: string): ReadmeBlock[] {
  const lines = markdown.split("\n");
  const blocks: ReadmeBlock[] = [];
  let pending: { line: number; skip?: string; cleanup: boolean } | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const marker = MARKER.exec(line);
    if (marker) {
      if (pending) throw new Error(`README.md:${pending.line}: readme-test marker not followed by a shell block`);
      pending = { line: i + 1, ...directive(marker[1]!, i + 1) };
      continue;
    }
    const open = FENCE.exec(line);
    if (!open) {
      if (pending && line.trim() !== "") throw new Error(`README.md:${pending.line}: readme-test marker not followed by a shell block`);
      continue;
    }
    const [, indent, fence, lang] = open as unknown as [string, string, string, string];
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const close = lines[j]!;
      if (close.trimStart().startsWith(fence) && close.trim().replaceAll(fence[0]!, "") === "") break;
      body.push(close.startsWith(indent) ? close.slice(indent.length) : close.trimStart());
    }
    if (j === lines.length) throw new Error(`README.md:${i + 1}: code block never closed`);
    if (SHELL_LANGUAGES.has(lang)) {
      blocks.push({
        index: blocks.length + 1,
        line: i + 1,
        text: `${body.join("\n")}\n`,
        skip: pending?.skip,
        cleanup: pending?.cleanup ?? false,
      });
    } else if (pending) {
      throw new Error(`README.md:${pending.line}: readme-test marker before a "${lang || "plain"}" block, not a shell block`);
    }
    pending = undefined;
    i = j;
  }
  if (pending) throw new Error(`README.md:${pending.line}: readme-test marker not followed by a shell block`);
  return blocks;
}

// The README test's extractor (test/helpers/readme-blocks.ts): which blocks it finds, where, and
// what their markers say; a marker it cannot read is an error, not a block quietly run or skipped.
import { describe, expect, it } from "vitest";
import { readmeBlocks } from "./helpers/readme-blocks.js";

const FENCE = "```";

describe("readmeBlocks", () => {
  it("finds the shell blocks in order, with the line of their fence, and leaves other blocks out", () => {
    const md = ["# T", `${FENCE}sh`, "echo one", FENCE, `${FENCE}json`, "{}", FENCE, "", `${FENCE}bash`, "echo two", FENCE].join("\n");
    expect(readmeBlocks(md)).toEqual([
      { index: 1, line: 2, text: "echo one\n", skip: undefined, cleanup: false },
      { index: 2, line: 9, text: "echo two\n", skip: undefined, cleanup: false },
    ]);
  });

  it("takes a block inside a list item without the item's indentation", () => {
    const md = ["- item:", "", `  ${FENCE}sh`, "  curl \\", "    -d x", `  ${FENCE}`].join("\n");
    expect(readmeBlocks(md)[0]!.text).toBe("curl \\\n  -d x\n");
  });

  it("reads a skip marker and a cleanup marker on the last non-blank line before the fence", () => {
    const md = [
      "<!-- readme-test: skip: needs a registry -->",
      `${FENCE}sh`,
      "docker build .",
      FENCE,
      "<!-- readme-test: cleanup -->",
      "",
      `${FENCE}sh`,
      "kill %1",
      FENCE,
    ].join("\n");
    expect(readmeBlocks(md).map((b) => [b.skip, b.cleanup])).toEqual([
      ["needs a registry", false],
      [undefined, true],
    ]);
  });

  it("does not take a fence inside a longer-fenced block for the start of a block", () => {
    const md = [`${FENCE}\`markdown`, `${FENCE}sh`, "not run", FENCE, `${FENCE}\``, `${FENCE}sh`, "run", FENCE].join("\n");
    expect(readmeBlocks(md).map((b) => b.text)).toEqual(["run\n"]);
  });

  it("refuses a marker it does not know, one before a non-shell block and one followed by prose", () => {
    expect(() => readmeBlocks(`<!-- readme-test: skipp: typo -->\n${FENCE}sh\nx\n${FENCE}`)).toThrow(
      /README.md:1: unknown readme-test marker/,
    );
    expect(() => readmeBlocks(`<!-- readme-test: cleanup -->\n${FENCE}json\n{}\n${FENCE}`)).toThrow(/before a "json" block/);
    expect(() => readmeBlocks(`<!-- readme-test: cleanup -->\nSome prose.\n${FENCE}sh\nx\n${FENCE}`)).toThrow(
      /not followed by a shell block/,
    );
  });
});

// Where a command's output goes: stdout for what was asked for (tables, documents, a new key's
// text), stderr for progress and errors, so `skipper get tenant x -o json | jq` and
// `skipper keys create ci --role operator > ci.key` work. Colour only on a terminal, and never
// when NO_COLOR is set (https://no-color.org). Tests give commands an Io of their own.

export interface Io {
  /** Writes to stdout; a newline is added. */
  out(text: string): void;
  /** Writes to stderr; a newline is added. */
  err(text: string): void;
  /** Whether stdout is a terminal and colour is wanted there. */
  color: boolean;
  env: NodeJS.ProcessEnv;
  /** All of stdin as text. */
  readStdin(): Promise<string>;
  /** Stdin's bytes, read no further than `maxBytes` + 1 (more than `maxBytes`: the input is over a cap). */
  readStdinBytes?(maxBytes: number): Promise<Uint8Array>;
}

/** The process's own streams. */
export function processIo(): Io {
  return {
    out: (text) => process.stdout.write(`${text}\n`),
    err: (text) => process.stderr.write(`${text}\n`),
    color: Boolean(process.stdout.isTTY) && process.env.NO_COLOR === undefined,
    env: process.env,
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      return Buffer.concat(chunks).toString("utf8");
    },
    readStdinBytes: (maxBytes) => readBounded(process.stdin, maxBytes),
  };
}

/** What `stream` holds, reading no further than `maxBytes` + 1 bytes: a caller refusing larger input never holds it all. */
export async function readBounded(stream: AsyncIterable<unknown>, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of stream) {
    const chunk = typeof c === "string" ? Buffer.from(c) : (c as Buffer);
    chunks.push(chunk);
    size += chunk.length;
    if (size > maxBytes) break;
  }
  return Buffer.concat(chunks).subarray(0, maxBytes + 1);
}

const CODES = { red: [31, 39], green: [32, 39], yellow: [33, 39], dim: [2, 22], bold: [1, 22] } as const;

/** `text` in a colour when `io` wants colour, else as it is. */
export function paint(io: Pick<Io, "color">, colour: keyof typeof CODES, text: string): string {
  if (!io.color) return text;
  const [on, off] = CODES[colour];
  return `\u001b[${on}m${text}\u001b[${off}m`;
}

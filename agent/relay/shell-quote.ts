// Quoting for the shell on the other end of an SSH connection. ssh joins its remote words with
// spaces and hands the line to the login shell of the node's user, so every word of a remote
// command is quoted here, and only here: the scripts the relay runs on a node are fixed texts
// (remote-process-scripts.ts) and all that varies is their arguments, each one quoted word.

/** `s` as one POSIX shell word: single quotes, an embedded quote as '\''. NUL cannot be passed. */
export function shellQuote(s: string): string {
  if (s.includes("\0")) throw new Error("a NUL byte cannot be passed to a remote shell");
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The remote line that runs `script` under sh with `args` as $1, $2, … (whatever the login shell). */
export function remoteSh(script: string, args: readonly string[]): string {
  return ["sh", "-c", shellQuote(script), "sh", ...args.map(shellQuote)].join(" ");
}

// Shell completion scripts, made from the program itself (so a new command or option completes
// without more work): `skipper completion bash` and `skipper completion zsh` (which loads the
// same function through zsh's bashcompinit). They complete subcommands, options, the resource
// types where a command takes one, and the values of -o.
import type { Command } from "commander";
import { OUTPUT_FORMATS } from "./output.js";
import { resourceTypeNames } from "./resource-types.js";

/** Commands whose first argument is a resource type. */
const TAKES_TYPE = new Set(["get", "describe", "explain"]);

/** The bash completion script. */
export function bashCompletion(program: Command): string {
  const subs: string[] = [];
  const words: string[] = [];
  walk(program, "", (path, cmd) => {
    const children = cmd.commands.flatMap((c) => [c.name(), ...c.aliases()]);
    const options = cmd.options.flatMap((o) => [o.long, o.short].filter((x): x is string => !!x));
    const globals = path === "" ? [] : program.options.flatMap((o) => [o.long].filter((x): x is string => !!x && x !== "--version"));
    const extra = TAKES_TYPE.has(path) ? resourceTypeNames() : [];
    subs.push(`    ${JSON.stringify(path)}) echo ${quote(children.join(" "))} ;;`);
    words.push(`    ${JSON.stringify(path)}) echo ${quote([...children, ...extra, ...options, ...globals, "--help"].join(" "))} ;;`);
  });
  return `# bash completion for skipper; load it with: source <(skipper completion bash)
_skipper_subcommands() {
  case "$1" in
${subs.join("\n")}
  esac
}
_skipper_words() {
  case "$1" in
${words.join("\n")}
  esac
}
_skipper() {
  local cur prev path w i
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev="\${COMP_WORDS[COMP_CWORD-1]}"
  case "$prev" in
    -o|--output) COMPREPLY=( $(compgen -W ${quote(OUTPUT_FORMATS.join(" "))} -- "$cur") ); return ;;
    -f|--filename|--ca-file|--token-file) COMPREPLY=( $(compgen -f -- "$cur") ); return ;;
  esac
  path=""
  for ((i=1; i<COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case " $(_skipper_subcommands "$path") " in
      *" $w "*) path="\${path:+$path }$w" ;;
    esac
  done
  COMPREPLY=( $(compgen -W "$(_skipper_words "$path")" -- "$cur") )
}
complete -o default -F _skipper skipper
`;
}

/** The zsh completion script: the bash one through bashcompinit. */
export function zshCompletion(program: Command): string {
  return `# zsh completion for skipper; load it with: source <(skipper completion zsh)
autoload -U +X compinit && compinit
autoload -U +X bashcompinit && bashcompinit
${bashCompletion(program).split("\n").slice(1).join("\n")}`;
}

function walk(cmd: Command, path: string, visit: (path: string, cmd: Command) => void): void {
  visit(path, cmd);
  for (const c of cmd.commands) walk(c, path ? `${path} ${c.name()}` : c.name(), visit);
}

function quote(s: string): string {
  return `'${s.replaceAll("'", "'\\''")}'`;
}

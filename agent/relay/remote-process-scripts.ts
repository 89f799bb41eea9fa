// Every command a relay runs on an SSH node for its process modules, as fixed sh texts that take
// their arguments as $1, $2, … (shell-quote.ts quotes them; nothing is pasted into a script).
// What may be secret (a version's meta and the launch script hold the order's env) goes on stdin,
// never on a command line another user of the node (or of the relay) could read with ps. The
// node's layout mirrors the agent's (agent/process/layout.ts), one directory per module under
// $HOME/<base> (REMOTE_PROCESS_BASE):
//   <module>/<version>/          an installed version: the artifact's files, never changed
//   <module>/.<version>.json     its sha256 and the command of its last deploy (VersionMeta)
//   <module>/active -> <version> switched with ln -sfn + mv -T (one rename: never missing)
//   <module>/.run/state.json     what the relay records: desired state, running launch, previous version
//   <module>/.run/launch.sh      the command the supervisor runs (launchScript)
//   <module>/.run/env            the launch's environment, 0600, sourced by launch.sh (envFile)
//   <module>/.run/supervise.sh   the supervisor (SUPERVISOR), its pid in .run/supervisor.pid
//   <module>/.run/child          "pid restarts last-exit" as the supervisor writes it (pid 0: none alive)
//   <module>/.run/log            the process's stdout and stderr, appended
// The supervisor is a POSIX sh loop started with setsid + nohup, so it is the leader of its own
// process group and outlives the SSH session (and the relay): it runs launch.sh, waits, records the
// exit and starts it again after a backoff (1 s, doubling per death within 60 s of its start, at
// most 300 s), as the agent's own supervisor does. Stopping kills the supervisor, then its group.
import { shellQuote } from "./shell-quote.js";
import { ProcessError } from "../process/layout.js";
import type { Launch } from "../process/run-state.js";
import { START_MARK } from "../process/supervisor.js";

/** Where process modules live on an SSH node, under its user's $HOME. */
export const REMOTE_PROCESS_BASE = ".skippy-ssh/processes";

// $1 is always the base under $HOME. A pid is alive when it is a positive number kill -0 reaches
// and, where /proc tells, not a zombie (an orphan init has not reaped yet). A pid read from a file
// may be another program's since a reboot: where /proc tells, the supervisor is ours only when its
// command line is ours (ours PID MODULE), the process only when it is in the supervisor's process
// group (member PID GROUP), so nothing else is reported or signalled.
const PRELUDE = `B="$HOME/$1"
alive() {
  case $1 in ''|*[!0-9]*|0) return 1 ;; esac
  kill -0 "$1" 2>/dev/null || return 1
  z=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  case \${z##*) } in Z*|X*) return 1 ;; esac
}
ours() {
  alive "$1" || return 1
  [ -r "/proc/$1/cmdline" ] || return 0
  tr '\\000' ' ' < "/proc/$1/cmdline" | grep -q "^sh .run/supervise.sh $2 \\$"
}
member() {
  [ "$1" != "$2" ] && alive "$1" || return 1
  z=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  g=$2
  set -- \${z##*) }
  [ "$3" = "$g" ]
}
`;

// What is known of one module, as "key value" lines (remote-process-observation.ts reads them).
const ONE = `one() {
  d="$B/$1"
  printf 'module %s\\n' "$1"
  a=$(readlink "$d/active" 2>/dev/null) && printf 'active %s\\n' "$a"
  for v in "$d"/*; do
    if [ -d "$v" ] && [ ! -L "$v" ]; then printf 'installed %s\\n' "\${v##*/}"; fi
  done
  s=$(cat "$d/.run/supervisor.pid" 2>/dev/null)
  c=0 n=0 x=
  [ -f "$d/.run/child" ] && read -r c n x < "$d/.run/child"
  member "$c" "$s" || c=0
  ours "$s" "$1" || s=0
  printf 'supervisor %s\\npid %s\\nrestarts %s\\nexit %s\\n' "$s" "$c" "\${n:-0}" "$x"
  if [ -n "$a" ] && [ -f "$d/.$a.json" ]; then printf 'meta '; cat "$d/.$a.json"; fi
  if [ -f "$d/.run/state.json" ]; then printf 'state '; cat "$d/.run/state.json"; fi
}
`;

/** Every module under the base (args: base). */
export const OBSERVE = `${PRELUDE}${ONE}[ -d "$B" ] || exit 0
for m in "$B"/*; do
  if [ -d "$m" ]; then one "\${m##*/}"; fi
done
`;

/** One module, and the recorded meta of one of its versions as "want" (args: base, module, version or ""). */
export const INSPECT = `${PRELUDE}${ONE}if [ -d "$B/$2" ]; then one "$2"; fi
if [ -n "$3" ] && [ -f "$B/$2/.$3.json" ]; then printf 'want '; cat "$B/$2/.$3.json"; fi
`;

/**
 * Installs a version from the tar archive on stdin (tree/: the version's files, meta.json: its
 * meta): unpacked beside the versions, the meta put in place, then the tree renamed into place
 * (args: base, module, version).
 */
export const INSTALL = `${PRELUDE}set -e
umask 077
d="$B/$2"
mkdir -p "$d/.run"
if [ -e "$d/$3" ]; then echo "version $3 of $2 is installed on the node already" >&2; exit 3; fi
rm -rf "$d"/.tmp-*
t="$d/.tmp-$$"
mkdir "$t"
tar -xf - -C "$t"
if [ ! -f "$t/meta.json" ] || [ ! -d "$t/tree" ]; then echo "the archive holds no tree/ and meta.json" >&2; exit 7; fi
mv -f "$t/meta.json" "$d/.$3.json"
mv "$t/tree" "$d/$3"
rm -rf "$t"
`;

/** Writes one of the module's records atomically from stdin (args: base, module, name under the module). */
export const PUT = `${PRELUDE}set -e
umask 077
d="$B/$2"
mkdir -p "$d/.run"
cat > "$d/$3.tmp"
mv -f "$d/$3.tmp" "$d/$3"
`;

/**
 * Stops the module: SIGTERM to the supervisor and its process group (only when the pid file names
 * our supervisor: a group id read from a file may be another program's), and to the process (a
 * member of that group, even when the supervisor died before it), SIGKILL to what is left after the
 * grace period, then waits (at most 5 s) for them to be gone; prints "was <pid>" (0: nothing ran).
 * Args: base, module, grace in tenths of a second.
 */
export const STOP = `${PRELUDE}d="$B/$2"
s=$(cat "$d/.run/supervisor.pid" 2>/dev/null)
c=0
[ -f "$d/.run/child" ] && read -r c n x < "$d/.run/child"
member "$c" "$s" || c=0
g=0
if ours "$s" "$2"; then
  g=$s
  kill -TERM "$s" 2>/dev/null
  kill -TERM "-$g" 2>/dev/null
fi
if [ "$c" != 0 ]; then kill -TERM "$c" 2>/dev/null; fi
i=0
while { [ "$g" != 0 ] && kill -0 "-$g" 2>/dev/null || alive "$c"; } && [ "$i" -lt "$3" ]; do sleep 0.1; i=$((i + 1)); done
if [ "$g" != 0 ]; then kill -KILL "-$g" 2>/dev/null; fi
if alive "$c"; then kill -KILL "$c" 2>/dev/null; fi
i=0
while { ours "$s" "$2" || alive "$c"; } && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$d/.run/supervisor.pid"
if [ -f "$d/.run/child" ]; then read -r p n x < "$d/.run/child"; echo "0 $n $x" > "$d/.run/child"; fi
printf 'was %s\\n' "$c"
`;

/**
 * Points the module's active symlink at a version and, with "run", writes the launch script and
 * its environment file from stdin (the script's first $6 lines, then the file), starts its
 * supervisor and prints "pid <pid>" of the process it started. A supervisor or process of the
 * module still alive is never doubled: the start is refused (exit 8) until it is stopped. Args:
 * base, module, version, supervisor script, "run" or "switch", the launch script's line count.
 */
export const START = `${PRELUDE}set -e
umask 077
d="$B/$2"
if [ ! -d "$d/$3" ]; then echo "version $3 of $2 is not installed on the node" >&2; exit 4; fi
mkdir -p "$d/.run"
ln -sfn "$3" "$d/.active.tmp"
mv -fT "$d/.active.tmp" "$d/active"
[ "$5" = run ] || exit 0
if ! command -v setsid >/dev/null; then echo "setsid is not installed on the node" >&2; exit 5; fi
s=$(cat "$d/.run/supervisor.pid" 2>/dev/null) || true
c=0
if [ -f "$d/.run/child" ]; then read -r c n x < "$d/.run/child" || true; fi
if ours "$s" "$2" || member "$c" "$s"; then
  echo "the supervisor or the process of $2 from before still runs on the node; it is stopped before a start" >&2
  exit 8
fi
cat > "$d/.run/in.tmp"
head -n "$6" "$d/.run/in.tmp" > "$d/.run/launch.sh"
tail -n "+$(($6 + 1))" "$d/.run/in.tmp" > "$d/.run/env"
rm -f "$d/.run/in.tmp"
printf '%s\\n' "$4" > "$d/.run/supervise.sh"
rm -f "$d/.run/child" "$d/.run/supervisor.pid"
cd "$d"
setsid nohup sh .run/supervise.sh "$2" < /dev/null > /dev/null 2>&1 &
i=0
until [ -s .run/child ]; do
  if [ "$i" -ge 100 ]; then echo "the supervisor did not start" >&2; exit 6; fi
  sleep 0.1
  i=$((i + 1))
done
read -r c n x < .run/child || true
printf 'pid %s\\n' "$c"
`;

/** The end of the module's log (args: base, module). */
export const TAIL = `${PRELUDE}tail -c 2048 "$B/$2/.run/log" 2>/dev/null || true
`;

/** The supervisor, run by START in the module's directory as `sh .run/supervise.sh <module>`. */
export const SUPERVISOR = `# skippy's supervisor of process module $1 (written by its relay at each start)
echo $$ > .run/supervisor.pid
n=0
k=0
x=
while :; do
  t=$(date +%s)
  sh .run/launch.sh >> .run/log 2>&1 < /dev/null &
  c=$!
  echo "$c $n $x" > .run/child.tmp && mv -f .run/child.tmp .run/child
  wait "$c"
  x=$?
  echo "0 $n $x" > .run/child.tmp && mv -f .run/child.tmp .run/child
  if [ $(($(date +%s) - t)) -lt 60 ]; then k=$((k + 1)); else k=0; fi
  w=1
  i=1
  while [ "$i" -lt "$k" ] && [ "$w" -lt 300 ]; do w=$((w * 2)); i=$((i + 1)); done
  if [ "$w" -gt 300 ]; then w=300; fi
  sleep "$w"
  n=$((n + 1))
done`;

/**
 * The command of one launch, run from the module's directory: a start mark in the log, then the
 * program through the active symlink with the launch's environment alone (and the node's PATH),
 * exec'd so the supervisor's child pid is the program's. The environment's values are read from
 * .run/env (envFile, 0600) by a sh that then execs the program: on a command line (env's, while
 * it runs) any user of the node could read them in /proc/<pid>/cmdline.
 */
export function launchScript(launch: Launch): string {
  const [argv0 = "", ...rest] = launch.argv;
  const program = argv0.startsWith("./") ? argv0 : `./${argv0}`;
  return [
    `echo ${shellQuote(`${START_MARK} ${launch.module} ${launch.version} at`)} "$(date -u +%Y-%m-%dT%H:%M:%SZ)"`,
    "cd active || exit 127",
    [
      "exec env -i",
      '"PATH=$PATH"',
      "sh -c",
      shellQuote('unset PWD; . ../.run/env && exec "$@"'),
      "sh",
      shellQuote(program),
      ...rest.map(shellQuote),
    ].join(" "),
  ].join("\n");
}

/** The launch's environment as the sh lines .run/env holds: `export NAME='value'`, one per variable. */
export function envFile(launch: Launch): string {
  return Object.entries(launch.env)
    .map(([k, v]) => {
      // Checked at deploy (deploy-process.ts specProblem); a record on the node may have been changed since.
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
        throw new ProcessError("PROCESS_INVALID", `env ${JSON.stringify(k)} is not a usable variable`);
      return `export ${k}=${shellQuote(v)}\n`;
    })
    .join("");
}

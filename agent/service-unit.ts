// The two texts `skippy install` hands to systemd: skippy.service, which runs the bundle's
// skippy-updater (and through it the agent) with Node, and the EnvironmentFile= of SKIPPY_*
// settings it reads. Values are written literally: what a unit or that file would reinterpret
// (quotes, backslashes, `$`, `%`, control characters) is refused instead of escaped, so the files
// read the same to systemd, to a shell and to people.

/** The unit's file name. */
export const UNIT_NAME = "skippy.service";

// A path in the unit is one plain word: no whitespace, quotes, backslashes, `$` or `%` specifiers.
const PLAIN_PATH = /^\/[^\s"'\\$%`\p{Cc}]*$/u;
// A value in the environment file sits between double quotes, where systemd and a shell agree.
const PLAIN_VALUE = /^[^"\\$`\p{Cc}]*$/u;

/** Throws unless `path` is absolute and fits in the unit file as one plain word. */
export function checkPlainPath(what: string, path: string): void {
  if (!PLAIN_PATH.test(path))
    throw new Error(`${what} must be an absolute path without spaces, quotes, backslashes, '$', '%' or control characters, got '${path}'`);
}

/** The environment file: one KEY="value" line per setting, readable by systemd and by `set -a; . file`. */
export function environmentFileText(vars: Record<string, string>): string {
  const lines = Object.entries(vars).map(([k, v]) => {
    if (!PLAIN_VALUE.test(v)) throw new Error(`${k} cannot hold quotes, backslashes, '$', '\`' or control characters, got '${v}'`);
    return `${k}="${v}"`;
  });
  return [
    "# skippy's settings, written by `skippy install`: running it again rewrites this file.",
    "# The agent reads these as it reads the flags `skippy --help` lists; the node token is in",
    "# its own file (SKIPPY_NODE_TOKEN_FILE, mode 0600), never here.",
    ...lines,
    "",
  ].join("\n");
}

/**
 * skippy.service: `node` runs the bundle's skippy-updater as root with the environment file's
 * settings; the updater runs the agent (its current version) as its child and switches versions
 * (agent/updater/updater.ts).
 */
export function unitText(opts: { node: string; bundle: string; environmentFile: string }): string {
  checkPlainPath("the Node binary", opts.node);
  checkPlainPath("the bundle", opts.bundle);
  checkPlainPath("the environment file", opts.environmentFile);
  return [
    "# skippy, the Skipper agent, as a system service. Written by `skippy install`: running it",
    "# again rewrites this file; put local changes in a drop-in (systemctl edit skippy).",
    "[Unit]",
    "Description=Skipper agent (skippy)",
    "Wants=network-online.target",
    "After=network-online.target docker.service",
    "",
    "[Service]",
    "Type=simple",
    `EnvironmentFile=${opts.environmentFile}`,
    `ExecStart=${opts.node} ${opts.bundle} updater`,
    "Restart=always",
    "RestartSec=5",
    // SIGTERM goes to the updater alone, which passes it to skippy: it finishes the order it runs
    // (its compose commands are not signalled) and exits, and the updater after it. One that
    // outlasts TimeoutStopSec is killed with the rest of the unit, and the journal has the agent
    // take the order up again when it starts.
    "KillMode=mixed",
    "TimeoutStopSec=90",
    "# Hardening that keeps what skippy's orders need: root for the Docker socket, for process",
    "# modules' own units under /etc/systemd/system and systemctl; its state and work directories;",
    "# the programs of its allow-list. Hence no ProtectSystem, ProtectHome, PrivateTmp or PrivateDevices.",
    "NoNewPrivileges=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "",
    "[Install]",
    "WantedBy=multi-user.target",
    "",
  ].join("\n");
}

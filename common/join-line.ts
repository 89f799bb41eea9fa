// The one line that makes a host a node (the controller's /v1/join.sh through curl, trusted by the
// pin of its certificate), as `skipper node join-command` and the dashboard print it. The token
// goes in sh's environment (SKIPPER_JOIN_TOKEN), never in a command's arguments: those are in
// every process list (/proc/*/cmdline) for as long as the join runs.

/** The one-liner for a host that reaches the controller at `url`; `pin` is "SHA256:<base64>". */
export function joinLine(opts: { url: string; pin: string; token: string; nodeId?: string }): string {
  const url = opts.url.replace(/\/+$/, "").replace(/\/v1$/, "");
  const b64 = opts.pin.replace(/^SHA256:/, "");
  const node = opts.nodeId ? ` --node-id ${opts.nodeId}` : "";
  return `curl -fsS --pinnedpubkey sha256//${b64} -k ${url}/v1/join.sh | SKIPPER_JOIN_TOKEN=${opts.token} sh -s --${node}`;
}

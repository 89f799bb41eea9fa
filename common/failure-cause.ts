// Why an order failed, in a few words: the one line of the engine's or Compose's output that says
// it (Compose v1 and v2 bury it under "Encountered errors while bringing up the project." or
// progress lines), its reason, and whether trying again can help. The agent reads it from what
// failed; the controller, the CLI and the dashboard show its summary before the result code.
// Imported by the dashboard too: no Node APIs here.
import { create } from "@bufbuild/protobuf";
import { FailureCauseSchema, FailureReason, type FailureCause } from "../gen/skipper/v1/failure_cause_pb.js";

const LINE_MAX = 500;
const SUMMARY_MAX = 200;

/**
 * Reasons that fail the same way on the next try: the order is not retried and the reconciler
 * issues no other order for the same spec until the desired state changes or an Apply. An unknown
 * registry host is among them: DNS answered that the name does not exist (a typo, a registry
 * never set up), which no retry changes; a DNS server that fails to answer is REGISTRY_UNREACHABLE.
 */
const PERMANENT: ReadonlySet<FailureReason> = new Set([
  FailureReason.PORT_IN_USE,
  FailureReason.IMAGE_NOT_FOUND,
  FailureReason.REGISTRY_HOST_UNKNOWN,
  FailureReason.UNAUTHORIZED,
  FailureReason.INVALID_REFERENCE,
  FailureReason.PERMISSION_DENIED,
]);

/** True when a failure of this reason will fail the same way again (not retried). */
export function isPermanentReason(reason: FailureReason | undefined): boolean {
  return reason !== undefined && PERMANENT.has(reason);
}

interface Rule {
  reason: FailureReason;
  test: RegExp;
  /** The summary of a line this rule matched. */
  say: (line: string) => string;
}

const capture = (re: RegExp, line: string): string => re.exec(line)?.[1] ?? "";
const quoted = (s: string) => s.replace(/^"|"$/g, "");

// Tried in order; the first rule some line matches decides, and its first matching line is the
// cause. Specific before general: "no such image: X: invalid reference format" is a bad
// reference, not a missing image.
const RULES: readonly Rule[] = [
  {
    reason: FailureReason.PORT_IN_USE,
    test: /address already in use|port is already allocated|ports are not available/i,
    say: (l) => {
      const port =
        capture(/listen (?:tcp|udp)[46]? (\S+?): bind/i, l) ||
        capture(/Bind for (\S+) failed/i, l) ||
        capture(/exposing port \w+ (\S+)/i, l);
      return port ? `port ${port} is already in use` : "a host port of the project is already in use";
    },
  },
  {
    reason: FailureReason.RATE_LIMITED,
    test: /toomanyrequests|too many requests|pull rate limit/i,
    say: (l) => `the registry${registryIn(l)} limits pulls (too many requests); trying again later`,
  },
  {
    reason: FailureReason.INVALID_REFERENCE,
    test: /invalid reference format|invalid image reference|not a valid repository\/tag/i,
    say: (l) => {
      const ref = capture(/no such image: (.+?): invalid reference format/i, l) || capture(/image reference "?([^"\s]+)"?/i, l);
      const why = capture(/invalid reference format: (.+)$/i, l);
      return `${ref ? `image reference ${ref}` : "an image reference"} is not valid${why ? ` (${why})` : ""}`;
    },
  },
  {
    reason: FailureReason.UNAUTHORIZED,
    test: /unauthorized|authentication required|no basic auth credentials|pull access denied|requested access to the resource is denied|denied: /i,
    say: (l) => {
      const image = capture(/pull access denied for ([^\s,]+)/i, l);
      if (image) return `the registry refused to pull ${image} (it does not exist or needs a login)`;
      return `the registry${registryIn(l)} asked for credentials${/incorrect|invalid username|password/i.test(l) ? " and refused the ones given" : ""}`;
    },
  },
  {
    reason: FailureReason.IMAGE_NOT_FOUND,
    test: /manifest unknown|manifest for \S+ not found|not found: manifest|repository does not exist|name unknown|no such image/i,
    say: (l) => {
      const image = capture(/manifest for (\S+) not found/i, l) || capture(/no such image: (\S+)/i, l);
      return image ? `image ${image.replace(/:$/, "")} was not found in its registry` : "the image was not found in its registry";
    },
  },
  {
    // Docker Hub's own hosts always exist: a node that cannot resolve them has a DNS or network problem.
    reason: FailureReason.REGISTRY_UNREACHABLE,
    test: /lookup (?:registry-1\.docker\.io|index\.docker\.io|auth\.docker\.io|docker\.io)\b.*no such host/i,
    say: (l) =>
      `registry ${capture(/lookup (\S+?)(?: on \S+)?:/i, l)} could not be resolved by the node (its DNS or network); trying again later`,
  },
  {
    reason: FailureReason.REGISTRY_HOST_UNKNOWN,
    test: /lookup \S+.*no such host|no such host/i,
    say: (l) => {
      const host = capture(/lookup (\S+?)(?: on \S+)?: no such host/i, l) || capture(/lookup (\S+)/i, l);
      return `registry host ${host || "of the image"} is unknown (DNS: no such host)`;
    },
  },
  {
    reason: FailureReason.REGISTRY_UNREACHABLE,
    test: /server misbehaving|temporary failure in name resolution|(?:dial tcp|\/v2\/|registry|lookup).*(?:i\/o timeout|connection refused|no route to host|network is unreachable|connection reset|timeout)|TLS handshake timeout|Client\.Timeout exceeded/i,
    say: (l) => {
      const host = capture(/lookup (\S+?)(?: on \S+)?:/i, l) || capture(/https?:\/\/([^/"\s]+)/i, l) || capture(/dial tcp (\S+?):? /i, l);
      const what = /server misbehaving|name resolution/i.test(l) ? "DNS did not answer" : "could not be reached";
      return `registry ${host || "of the image"}: ${what}; trying again later`;
    },
  },
  {
    reason: FailureReason.NO_SPACE,
    test: /no space left on device/i,
    say: () => "the node's disk is full (no space left on device)",
  },
  {
    reason: FailureReason.PERMISSION_DENIED,
    test: /permission denied|operation not permitted/i,
    say: (l) => {
      const path = capture(/(?:mkdir|open|stat|mount source path|lstat) '?([^\s':]+)'?:? .*permission denied/i, l);
      return path ? `permission denied on ${path}` : "permission denied";
    },
  },
];

// Compose's own words around the cause, never the cause itself.
const NOISE =
  /^(?:Encountered errors while bringing up the project\.?|ERROR: Encountered errors.*|Creating |Starting |Recreating |Pulling |Network |Container |Volume |Image |\S+ (?:Pulling|Pulled|Creating|Created|Starting|Started|Waiting|Healthy|Error)\s*$|Host is already in use by another container)/i;

/** The registry named in a line, as " host" (empty when none is). */
function registryIn(line: string): string {
  const host = capture(/https?:\/\/([^/"\s]+)/i, line);
  return host ? ` ${host}` : "";
}

function clip(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max - 3)}...` : s;
}

/**
 * The cause of a failure from the output of what failed (Compose's or the engine's stderr, or a
 * message): the first line a rule recognises, else the last line that is not Compose's own
 * progress or summary (reason UNKNOWN). Never undefined: an empty output is UNKNOWN with no line.
 */
export function failureCause(output: string, fallback = ""): FailureCause {
  const lines = output
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  for (const rule of RULES) {
    const line = lines.find((l) => rule.test.test(l));
    if (line !== undefined) return cause(rule.reason, line, rule.say(line));
  }
  const line = lines.filter((l) => !NOISE.test(l)).at(-1) ?? lines.at(-1) ?? fallback;
  return cause(FailureReason.UNKNOWN, line, quoted(line.replace(/^(?:ERROR: (?:for \S+\s+)?|Error response from daemon: )/i, "")));
}

function cause(reason: FailureReason, line: string, summary: string): FailureCause {
  return create(FailureCauseSchema, { reason, line: clip(line, LINE_MAX), summary: clip(summary, SUMMARY_MAX) });
}

// Codes of a Compose run, whose own output says more than the executor's message.
const COMPOSE_CODES: ReadonlySet<string> = new Set(["COMPOSE_FAILED", "IMAGE_PULL_FAILED", "IMAGE_NOT_FOUND", "REMOVE_FAILED"]);

/**
 * The cause of a failed result (its code, message and the failed command's stderr): what a rule
 * knows in the output, else in the message; a line no rule knows is the cause only of a Compose
 * run's failure (else the executor's own message says more).
 */
export function resultCause(code: string, message: string, stderr: string): FailureCause {
  const fromOutput = failureCause(stderr);
  if (fromOutput.reason !== FailureReason.UNKNOWN) return fromOutput;
  const fromMessage = failureCause(message, code);
  if (fromMessage.reason !== FailureReason.UNKNOWN || !COMPOSE_CODES.has(code) || stderr.trim() === "") return fromMessage;
  return fromOutput;
}

// Codes whose retry is about the run, not what it printed: kept as their executor (or the agent) set it.
const RUN_CODES: ReadonlySet<string> = new Set(["TIMEOUT", "CANCELLED", "LEASE_LOST", "DOCKER_UNAVAILABLE", "AGENT_ERROR"]);

/**
 * Whether a failed result with this code and cause is retried (`retriable`: what its executor
 * said): never for a cause that fails the same way again (a held port, a missing image, a bad
 * reference...), always for a Compose run that failed for one that may pass (a registry
 * unreachable, rate limited, a full disk); codes about the run itself keep what they said.
 */
export function retriableWith(code: string, retriable: boolean, cause: FailureCause): boolean {
  if (RUN_CODES.has(code)) return retriable;
  if (isPermanentReason(cause.reason)) return false;
  if (cause.reason !== FailureReason.UNKNOWN && cause.reason !== FailureReason.UNSPECIFIED && COMPOSE_CODES.has(code)) return true;
  return retriable;
}

/** The reason's short name, as events and tables write it: "port_in_use". */
export function reasonName(reason: FailureReason): string {
  return (FailureReason[reason] ?? "UNKNOWN").toLowerCase();
}

/** A failure's cause as event data (webhooks carry it): its reason's short name, its summary and its line. */
export function causeData(cause: FailureCause | undefined): Record<string, string> {
  if (!cause || cause.reason === FailureReason.UNSPECIFIED) return {};
  return { reason: reasonName(cause.reason), cause: cause.summary, cause_line: cause.line };
}

/**
 * A failure in one line, its cause first: "port 127.0.0.1:28932 is already in use (COMPOSE_FAILED)";
 * without a cause (an older agent, a failure no output explains), "CODE: message".
 */
export function failureHeadline(code: string, message: string, cause?: FailureCause): string {
  if (cause && cause.reason !== FailureReason.UNSPECIFIED && cause.summary !== "")
    return code ? `${cause.summary} (${code})` : cause.summary;
  return code && message ? `${code}: ${message}` : code || message;
}

/**
 * An order's result in a line, a failure's cause first: "port 127.0.0.1:80 is already in use
 * (COMPOSE_FAILED): compose up failed (exit 1): ..."; else "CODE: message".
 */
export function resultLine(code: string, message: string, cause?: FailureCause): string {
  const head = failureHeadline(code, "", cause);
  return message === "" ? head : `${head}: ${message}`;
}

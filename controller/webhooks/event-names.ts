// The names webhooks use for events, and the patterns subscriptions choose them by.
//
// An event type is named with a dot between its subject and what happened: the subject is the
// longest known prefix of the stored type (deployment, work_order, rollout, node, resource, ...),
// the rest follows the dot. So `deployment_failed` is `deployment.failed`, `work_order_failed`
// `work_order.failed`, `rollout_node_failed` `rollout.node_failed`, `node_offline`
// `node.offline`, `desired_state_changed` `desired_state.changed`; a type with no known subject
// keeps its name. A pattern is a name (`rollout.failed`), a subject with a star
// (`deployment.*`: every event of deployments), or `*` alone (every event).
import { invalid } from "../base/errors.js";

// Longest first, so that work_order_ wins over a shorter prefix.
const SUBJECTS = [
  "desired_state",
  "work_order",
  "deployment",
  "convergence",
  "delivery",
  "git_sync",
  "resource",
  "snapshot",
  "process",
  "rollout",
  "drift",
  "data",
  "node",
];

/** The dotted name of a stored event type (deployment_failed -> deployment.failed). */
export function dottedName(type: string): string {
  for (const subject of SUBJECTS) {
    if (type.startsWith(`${subject}_`) && type.length > subject.length + 1) return `${subject}.${type.slice(subject.length + 1)}`;
  }
  return type;
}

const NAME = /^[a-z][a-z0-9_]*(\.([a-z][a-z0-9_]*|\*))?$/;

/** INVALID_REQUEST unless every pattern is `*`, `subject.*` or a dotted name; at least one, at most 32. */
export function checkPatterns(patterns: readonly string[]): string[] {
  if (patterns.length === 0) throw invalid("event_types needs at least one pattern (`*` for every event)", { field: "event_types" });
  if (patterns.length > 32) throw invalid("event_types holds at most 32 patterns", { field: "event_types" });
  for (const p of patterns) {
    if (p !== "*" && (p.length > 100 || !NAME.test(p))) {
      throw invalid(`event type pattern ${JSON.stringify(p.slice(0, 100))} is not \`*\`, \`subject.*\` or a dotted name`, {
        field: "event_types",
      });
    }
  }
  return [...new Set(patterns)];
}

/** True when the dotted `name` matches one of `patterns`. */
export function matchesAny(patterns: readonly string[], name: string): boolean {
  return patterns.some((p) => p === "*" || p === name || (p.endsWith(".*") && name.startsWith(p.slice(0, -1))));
}

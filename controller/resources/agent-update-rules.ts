// Field rules of agent_update resources (which agent version the nodes a selector takes should
// run): the version names an agent_version (a reference, checked where references are), the
// selector is a label selector, the rollout policy obeys the tenants' rules, and the deadline the
// updater waits for a new agent to reach the controller is between 10 s and 1 h.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { AgentUpdateSpec } from "../../gen/skipper/v1/agent_update_pb.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { checkSelector } from "../domain/label-selector.js";
import { checkRolloutPolicy } from "./rollout-rules.js";

/** The deadline when the spec sets none, and its bounds. */
export const DEFAULT_UPDATE_DEADLINE_MS = 120_000;
const MIN_DEADLINE_MS = 10_000;
const MAX_DEADLINE_MS = 3_600_000;

/** Throws INVALID_REQUEST naming the field that breaks a rule. */
export function checkAgentUpdateSpec(s: AgentUpdateSpec): void {
  const f = "desired_state.agent_update";
  if (s.version === "") throw invalid(`${f}.version is required: the id of an agent_version`, { field: `${f}.version` });
  checkId(s.version, `${f}.version`);
  checkSelector(s.nodeSelector, `${f}.node_selector`);
  checkRolloutPolicy(s.policy, `${f}.policy`);
  if (s.policy?.requireApproval)
    throw invalid(`${f}.policy.require_approval is not taken by agent updates: set paused instead, and clear it to go on`, {
      field: `${f}.policy.require_approval`,
    });
  if (s.deadline) {
    const ms = durationMs(s.deadline);
    if (!(ms >= MIN_DEADLINE_MS && ms <= MAX_DEADLINE_MS))
      throw invalid(`${f}.deadline must be between 10s and 1h, got ${ms} ms`, { field: `${f}.deadline` });
  }
}

/** The deadline an update gives a node's new agent, in ms. */
export function updateDeadlineMs(s: AgentUpdateSpec): number {
  return s.deadline ? durationMs(s.deadline) : DEFAULT_UPDATE_DEADLINE_MS;
}

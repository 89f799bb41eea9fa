// An operator's commands on a rollout (RolloutService): pause, resume, promote, abort. Pure: each
// returns the changed record and its event, or `unchanged` when the command already holds (a
// retry), or throws CONFLICT when it does not fit the rollout's status.
import { clone } from "@bufbuild/protobuf";
import { type Rollout, type RolloutActor, RolloutSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { conflict, invalid } from "../base/errors.js";
import type { RolloutEventDraft } from "./rollout-actions.js";

export type RolloutCommand =
  | { kind: "pause" }
  | { kind: "resume" }
  | { kind: "promote"; wave: string }
  | { kind: "abort" }
  /** `current` is the plan hash of the fleet as it is now (rollout-plan.ts planHash). */
  | { kind: "approve"; planHash: string; current: string };

export interface CommandResult {
  rollout: Rollout;
  event?: RolloutEventDraft;
}

/** Applies `cmd` by `actor` to a copy of `rollout`. */
export function runCommand(rollout: Rollout, cmd: RolloutCommand, actor: RolloutActor): CommandResult {
  const r = clone(RolloutSchema, rollout);
  const unchanged = { rollout };
  const status = r.status;
  const refuse = (what: string): never => {
    throw conflict(`rollout ${r.id} is ${(RolloutStatus[status] ?? "").toLowerCase()}: cannot ${what} it`, {
      rollout_id: r.id,
      status: RolloutStatus[status] ?? "",
    });
  };
  const data = { reason: actor.reason };
  switch (cmd.kind) {
    case "pause":
      if (status === RolloutStatus.PAUSED) return unchanged;
      if (status !== RolloutStatus.PROGRESSING) refuse("pause");
      r.status = RolloutStatus.PAUSED;
      r.paused = actor;
      r.message = `paused by ${actor.actor}${actor.reason ? `: ${actor.reason}` : ""}`;
      return { rollout: touched(r, actor), event: { type: "rollout_paused", data } };
    case "resume":
      if (status === RolloutStatus.PROGRESSING) return unchanged;
      if (status !== RolloutStatus.PAUSED) refuse("resume");
      r.status = RolloutStatus.PROGRESSING;
      r.resumed = actor;
      r.message = `resumed by ${actor.actor}${actor.reason ? `: ${actor.reason}` : ""}`;
      return { rollout: touched(r, actor), event: { type: "rollout_resumed", data } };
    case "promote": {
      if (status !== RolloutStatus.PROGRESSING && status !== RolloutStatus.PAUSED) refuse("promote");
      const k = cmd.wave === "" ? r.waves.findIndex((w) => w.requirePromote && !w.promoted) : r.waves.findIndex((w) => w.name === cmd.wave);
      if (k < 0 && cmd.wave !== "") throw invalid(`rollout ${r.id} has no wave "${cmd.wave}"`, { field: "wave" });
      if (k < 0)
        throw conflict(`no wave of rollout ${r.id} waits for a promote`, { rollout_id: r.id, status: RolloutStatus[status] ?? "" });
      const wave = r.waves[k]!;
      if (!wave.requirePromote) throw invalid(`wave "${wave.name}" of rollout ${r.id} has no promote gate`, { field: "wave" });
      if (wave.promoted) return unchanged;
      wave.promoted = actor;
      return { rollout: touched(r, actor), event: { type: "rollout_promoted", data: { ...data, wave: wave.name, index: k } } };
    }
    case "approve": {
      const pinned = r.plan?.planHash ?? "";
      if (status !== RolloutStatus.PENDING_APPROVAL) {
        if (r.approved && pinned === cmd.planHash) return unchanged;
        refuse("approve");
      }
      if (cmd.planHash !== pinned) {
        throw conflict(`plan ${cmd.planHash || '""'} is not the plan of rollout ${r.id}`, { rollout_id: r.id, plan_hash: pinned });
      }
      if (cmd.current !== pinned) {
        throw conflict(`the fleet changed since plan ${pinned} was made: a node runs another spec now; see the new plan`, {
          rollout_id: r.id,
          plan_hash: pinned,
          current_plan_hash: cmd.current,
        });
      }
      r.status = RolloutStatus.PROGRESSING;
      r.approved = actor;
      r.message = `plan approved by ${actor.actor}${actor.reason ? `: ${actor.reason}` : ""}`;
      return { rollout: touched(r, actor), event: { type: "rollout_approved", data: { ...data, plan_hash: pinned } } };
    }
    case "abort":
      if (status === RolloutStatus.ROLLING_BACK || status === RolloutStatus.ROLLED_BACK) return unchanged;
      if (status !== RolloutStatus.PROGRESSING && status !== RolloutStatus.PAUSED && status !== RolloutStatus.PENDING_APPROVAL)
        refuse("abort");
      r.status = RolloutStatus.ROLLING_BACK;
      r.aborted = actor;
      r.message = `aborted by ${actor.actor}${actor.reason ? `: ${actor.reason}` : ""}; returning the updated nodes to their previous spec`;
      return { rollout: touched(r, actor), event: { type: "rollout_aborted", data } };
  }
}

function touched(r: Rollout, actor: RolloutActor): Rollout {
  r.updatedAt = actor.at;
  return r;
}

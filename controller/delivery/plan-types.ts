// What the promotion planner reads and returns (design 2.2). The world read
// (environment-world.ts) builds an EnvDesired and an EnvObserved per environment; the planner is
// pure over them and `now`; the environment pass executes the plan's actions and writes its status.
import type {
  ArtifactSpec,
  DeliverySpec,
  EnvironmentSpec,
  EnvironmentStatus,
  Release,
  ReleaseOutcome,
} from "../../gen/skipper/v1/delivery_pb.js";
import type { TenantRelease } from "../../gen/skipper/v1/resource_pb.js";
import type { RolloutActor, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import type { WorkOrderStatus } from "../../gen/skipper/v1/work_order_pb.js";
import type { Freeze } from "../rollouts/rollout-stops.js";

export type { Freeze };

/** What the environment is asked to do: its spec, its delivery's groups, the artifacts it names. */
export interface EnvDesired {
  env: { id: string; spec: EnvironmentSpec };
  delivery: DeliverySpec;
  artifacts: Map<string, ArtifactSpec>;
}

/** One artifact version as the planner sees it. */
export interface VersionView {
  /** "<artifact>.<version>". */
  id: string;
  artifactId: string;
  /** The tag as recorded (its own spelling). */
  version: string;
  digest: string;
  reference: string;
  createdAtMs: number;
  metadata: Record<string, string>;
  /** Set by MarkVersionBad. */
  markedBad?: RolloutActor;
}

/** A tenant of the environment: the release its desired state carries and its latest rollout. */
export interface TenantView {
  id: string;
  release?: TenantRelease;
  rollout?: {
    id: string;
    status: RolloutStatus;
    message: string;
    /** Set only by AbortRollout: who aborted it and why. */
    aborted?: RolloutActor;
    /** When it was created: a rollout older than the promotion is not the promotion's (ms). */
    createdAtMs?: number;
  };
  /**
   * Set when a target of its current desired state gave up (ORDER_FAILED, or ROLLED_BACK by a
   * quarantine): which node and why. Without a rollout this is how a failed deploy shows.
   */
  failed?: string;
}

/** A verification work order as the planner sees it. */
export interface OrderView {
  id: string;
  status: WorkOrderStatus;
  resultCode: string;
  message: string;
  createdAtMs: number;
  finishedAtMs?: number;
}

/** What the environment and the things it depends on are now. */
export interface EnvObserved {
  /** As stored: pin, hold, decisions, in_flight, history. */
  status: EnvironmentStatus;
  /** Per artifact, newest first (version-order.ts): the newest 50 and any referenced. */
  versions: Map<string, VersionView[]>;
  /** The stored status of each environment this one depends on, by id. */
  upstream: Map<string, EnvironmentStatus>;
  /** The environment's tenants, by id order. */
  tenants: TenantView[];
  /** Every freeze (only those of a tenant of the environment or of every tenant count). */
  freezes: Freeze[];
  /** Verification orders of the release in flight, by order id. */
  verificationOrders: Map<string, OrderView>;
  /** Per tenant: its online nodes converged on the release, by id. */
  nodesRunning: Map<string, string[]>;
}

/** The events the planner writes with the status (design section 6). */
export type DeliveryEventType =
  | "delivery_promoted"
  | "delivery_demoted"
  | "delivery_candidate_waiting"
  | "delivery_constraint_failed"
  | "delivery_verification_passed"
  | "delivery_verification_failed"
  | "delivery_release_verified"
  | "delivery_release_failed"
  | "delivery_environment_held";

/** An event to record with the status write: its type and its data (always the environment id). */
export interface DeliveryEvent {
  type: DeliveryEventType;
  data: Record<string, string>;
}

/** One thing the executor does for the plan (the status already reflects it). */
export type EnvAction =
  /** current := release; in_flight DEPLOYING. */
  | { type: "promote"; release: Release; by: RolloutActor }
  /** current := to (a version marked bad, or ROLLBACK after a failed verification). */
  | { type: "demote"; to: Release; because: string }
  /** Queue the verification order `orderId` (deterministic: re-queuing returns the stored order). */
  | { type: "run-verification"; name: string; tenantId: string; nodeId: string; orderId: string }
  | { type: "end-promotion"; outcome: ReleaseOutcome; reason: string }
  | { type: "hold"; by: RolloutActor }
  | { type: "event"; event: DeliveryEvent };

/** What one environment should do now, and its status after it. */
export interface EnvPlan {
  actions: EnvAction[];
  status: EnvironmentStatus;
  /** When the planner should look again by itself (ms). */
  wakeAt?: number;
}

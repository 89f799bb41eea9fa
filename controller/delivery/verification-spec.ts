// A verification's settings with their defaults (proto zero values mean "default").
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { EnvironmentSpec, Verification } from "../../gen/skipper/v1/delivery_pb.js";

/** A duration in ms; `fallback` when unset. */
export function durationMs(d: Duration | undefined, fallback: number): number {
  if (!d) return fallback;
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1_000_000);
}

export const requiredOf = (v: Verification | undefined) => v?.requiredPasses || 1;
export const maxFailuresOf = (v: Verification | undefined) => v?.maxFailures || 1;
export const intervalOf = (v: Verification | undefined) => Math.max(1000, durationMs(v?.interval, 30_000));

/** Passes the environment's verification `name` needs. */
export function requiredPasses(spec: EnvironmentSpec, name: string): number {
  return requiredOf(spec.verifications.find((v) => v.name === name));
}

// What a plan collects as its steps run: the actions (events among them) and the earliest time it
// should look again.
import type { DeliveryEventType, EnvAction } from "./plan-types.js";

export class PlanOut {
  readonly actions: EnvAction[] = [];
  wakeAt?: number;

  constructor(
    readonly envId: string,
    readonly now: number,
  ) {}

  act(a: EnvAction): void {
    this.actions.push(a);
  }

  /** An event of this environment, with `data` beside its id. */
  event(type: DeliveryEventType, data: Record<string, string>): void {
    this.actions.push({ type: "event", event: { type, data: { environment_id: this.envId, ...data } } });
  }

  /** Look again at `t` (ms) if it is the earliest future time asked for. */
  wake(t: number | undefined): void {
    if (t !== undefined && t > this.now && (this.wakeAt === undefined || t < this.wakeAt)) this.wakeAt = t;
  }
}

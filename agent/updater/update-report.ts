// The agent's side of skippy-updater: whether it runs supervised (SKIPPY_UPDATER_DIR set by the
// updater), what it says of the updater in every heartbeat (AgentUpdateReport, from state.json),
// and confirmed.json, which it writes once the controller accepted it, so that the updater knows
// the new version works.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type AgentUpdateReport, AgentUpdateReportSchema, AgentUpdateState } from "../../gen/skipper/v1/agent_update_pb.js";
import { BUNDLE_SHA256_ENV, readUpdaterState, SHA256_PATTERN, sha256File, UPDATER_DIR_ENV, writeConfirmed } from "./update-files.js";

/** What the agent knows and says of its updater. */
export class UpdaterLink {
  private last: AgentUpdateReport;
  private confirmedOnce = false;
  private sha256: string | undefined;

  /**
   * `dir`: the updater directory (undefined: not supervised); `sha256`: the bundle that runs as the
   * updater said; `bundle`: the file to hash when it did not.
   */
  constructor(
    readonly dir: string | undefined,
    sha256: string | undefined,
    private readonly bundle: string | undefined,
    private readonly onError: (what: string, e: Error) => void = () => undefined,
  ) {
    this.sha256 = sha256 && SHA256_PATTERN.test(sha256) ? sha256 : undefined;
    this.last = create(AgentUpdateReportSchema, { supervised: this.supervised, runningSha256: this.sha256 ?? "" });
  }

  /** The link of this process, from its environment. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env, bundle = process.argv[1], onError?: (what: string, e: Error) => void): UpdaterLink {
    const dir = env[UPDATER_DIR_ENV] || undefined;
    return new UpdaterLink(dir, env[BUNDLE_SHA256_ENV], bundle, onError);
  }

  /** The agent runs under skippy-updater. */
  get supervised(): boolean {
    return this.dir !== undefined;
  }

  /** Reads state.json again (keeps the last report when it cannot). */
  async refresh(): Promise<AgentUpdateReport> {
    if (!this.dir) return this.last;
    try {
      const s = await readUpdaterState(this.dir);
      this.last = create(AgentUpdateReportSchema, {
        state: s ? AgentUpdateState[s.state] : AgentUpdateState.IDLE,
        targetVersion: s?.target?.version ?? "",
        targetSha256: s?.target?.sha256 ?? "",
        previousVersion: s?.previous?.version ?? "",
        // Heartbeat strings are bounded (4,096 characters): the sentence, not a dump.
        message: (s?.message ?? "").slice(0, 1000),
        changedAt: s?.changedAt && !Number.isNaN(Date.parse(s.changedAt)) ? timestampFromDate(new Date(s.changedAt)) : undefined,
        supervised: true,
        runningSha256: (await this.runningSha256()) ?? "",
      });
    } catch (e) {
      this.onError("read the updater's state", e as Error);
    }
    return this.last;
  }

  /** The report as of the last refresh. */
  report(): AgentUpdateReport {
    return this.last;
  }

  /**
   * The controller accepted this agent (a heartbeat answered, a session welcomed): tells the
   * updater once per process (confirmed.json), which is what confirms a new version.
   */
  async accepted(): Promise<void> {
    if (!this.dir || this.confirmedOnce) return;
    const sha = await this.runningSha256();
    if (!sha) return;
    try {
      await writeConfirmed(this.dir, sha);
      this.confirmedOnce = true;
    } catch (e) {
      this.onError("write confirmed.json", e as Error);
    }
  }

  private async runningSha256(): Promise<string | undefined> {
    if (this.sha256 || !this.bundle) return this.sha256;
    this.sha256 = await sha256File(this.bundle).catch(() => undefined);
    return this.sha256;
  }
}

// The agent's side of skippy-updater: whether it runs supervised (SKIPPY_UPDATER_DIR set by the
// updater), what it says of the updater in every heartbeat (AgentUpdateReport, from state.json),
// and confirmed.json, which it writes once the controller accepted it, so that the updater knows
// the new version works. It also watches state.json (a stat every 500 ms), so that a change of
// the updater's state (CONFIRMED, ROLLED_BACK, FAILED...) is reported at once, not at the next
// heartbeat (10 s on a session).
import { stat } from "node:fs/promises";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type AgentUpdateReport, AgentUpdateReportSchema, AgentUpdateState } from "../../gen/skipper/v1/agent_update_pb.js";
import {
  BUNDLE_SHA256_ENV,
  readUpdaterState,
  SHA256_PATTERN,
  sha256File,
  UPDATER_DIR_ENV,
  updaterPaths,
  writeConfirmed,
} from "./update-files.js";

/** How often the agent looks whether state.json changed. */
export const STATE_WATCH_MS = 500;

/** What the agent knows and says of its updater. */
export class UpdaterLink {
  private last: AgentUpdateReport;
  private confirmedOnce = false;
  private sha256: string | undefined;
  // state.json's stat (see stateStamp) when the last report was read from it; undefined before.
  private reportedStamp: string | undefined;

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
      // Stamped before the read: a write in between is seen as a change again, never missed.
      const stamp = await this.stateStamp();
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
      this.reportedStamp = stamp;
    } catch (e) {
      this.onError("read the updater's state", e as Error);
    }
    return this.last;
  }

  /**
   * Calls `moved` whenever state.json is not what the last report was read from (looked at every
   * `everyMs`; once reported, quiet again). Nothing before the first report, nor unsupervised.
   * Returns the stop.
   */
  watch(moved: () => void, everyMs = STATE_WATCH_MS): () => void {
    if (!this.dir) return () => undefined;
    let looking = false;
    const timer = setInterval(() => {
      if (looking || this.reportedStamp === undefined) return;
      looking = true;
      this.stateStamp()
        .then((stamp) => {
          if (this.reportedStamp !== undefined && stamp !== this.reportedStamp) moved();
        })
        .catch((e: Error) => this.onError("look at the updater's state", e))
        .finally(() => (looking = false));
    }, everyMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  // Identifies one write of state.json: the updater renames a new file over it each time (a new
  // inode or a new mtime, to the nanosecond), so a stat tells a change without reading it.
  private async stateStamp(): Promise<string> {
    const s = await stat(updaterPaths(this.dir!).state, { bigint: true }).catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") return undefined;
      throw e;
    });
    return s ? `${s.ino}:${s.mtimeNs}:${s.size}` : "none";
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

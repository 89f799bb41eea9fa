// Removes named volumes of a compose project whose data a deletion asked to remove. Volumes are
// found by compose's labels (project and volume key), so the name compose gave them (v1 and v2
// normalise project names differently) does not matter. A volume already gone is no work.
import { ID_PATTERN } from "../../controller/ids.js";
import { runCommand, type CommandRun } from "./run-command.js";

const TIMEOUT_MS = 60_000;

export interface VolumeRemoval {
  /** Engine names of the volumes removed. */
  removed: string[];
  /** Set when the engine refused (a volume still in use, the engine down): why, with the command. */
  failure?: { message: string; run: CommandRun };
}

/** Removes the volumes with compose volume keys `keys` of `project`. */
export async function removeProjectVolumes(project: string, keys: string[]): Promise<VolumeRemoval> {
  const wanted = new Set(keys.filter((k) => ID_PATTERN.test(k)));
  if (wanted.size === 0) return { removed: [] };
  const ls = await runCommand("docker", ["volume", "ls", "--filter", `label=com.docker.compose.project=${project}`, "--format", '{{.Name}}\t{{.Label "com.docker.compose.volume"}}'], {
    timeoutMs: TIMEOUT_MS,
    uncapped: true,
  });
  if (ls.exitCode !== 0) return { removed: [], failure: { message: `could not list the project volumes: ${lastLine(ls.stderr)}`, run: ls } };
  const names = ls.stdout
    .split("\n")
    .map((l) => l.split("\t"))
    .filter(([name, key]) => name && key !== undefined && wanted.has(key.trim()))
    .map(([name]) => name!.trim())
    .sort();
  if (names.length === 0) return { removed: [] };
  const rm = await runCommand("docker", ["volume", "rm", ...names], { timeoutMs: TIMEOUT_MS });
  if (rm.exitCode !== 0) return { removed: [], failure: { message: `could not remove volumes ${names.join(", ")}: ${lastLine(rm.stderr)}`, run: rm } };
  return { removed: names };
}

function lastLine(s: string): string {
  return s.trim().split("\n").pop() ?? "";
}

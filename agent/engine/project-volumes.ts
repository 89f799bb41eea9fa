// Removes named volumes of a compose project whose data a deletion asked to remove. Volumes are
// found by compose's labels (project and volume key), so the name compose gave them (v1 and v2
// normalise project names differently) does not matter. A volume already gone counts as removed.
// Best effort: a volume the engine refuses to remove (still in use by a container outside the
// project, say) is reported, not retried.
import { ID_PATTERN } from "../../common/ids.js";
import { runCommand, type CommandRun } from "./run-command.js";

const TIMEOUT_MS = 60_000;

export interface VolumeRemoval {
  /** Compose volume keys whose volumes are gone (removed now, or not there). */
  deleted: string[];
  /** Keys the engine would not remove, with why; and the last failed command. */
  failed: { key: string; message: string }[];
  run?: CommandRun;
}

/** Removes the volumes with compose volume keys `keys` of `project`. */
export async function removeProjectVolumes(project: string, keys: string[]): Promise<VolumeRemoval> {
  const wanted = [...new Set(keys.filter((k) => ID_PATTERN.test(k)))].sort();
  if (wanted.length === 0) return { deleted: [], failed: [] };
  const ls = await runCommand(
    "docker",
    [
      "volume",
      "ls",
      "--filter",
      `label=com.docker.compose.project=${project}`,
      "--format",
      '{{.Name}}\t{{.Label "com.docker.compose.volume"}}',
    ],
    {
      timeoutMs: TIMEOUT_MS,
      uncapped: true,
    },
  );
  if (ls.exitCode !== 0)
    return {
      deleted: [],
      failed: wanted.map((key) => ({ key, message: `could not list the project volumes: ${lastLine(ls.stderr)}` })),
      run: ls,
    };
  const byKey = new Map<string, string[]>();
  for (const [name, key] of ls.stdout.split("\n").map((l) => l.split("\t"))) {
    if (!name || key === undefined) continue;
    byKey.set(key.trim(), [...(byKey.get(key.trim()) ?? []), name.trim()]);
  }
  const out: VolumeRemoval = { deleted: [], failed: [] };
  for (const key of wanted) {
    const names = byKey.get(key) ?? [];
    if (names.length === 0) {
      out.deleted.push(key);
      continue;
    }
    const rm = await runCommand("docker", ["volume", "rm", ...names], { timeoutMs: TIMEOUT_MS });
    if (rm.exitCode === 0) out.deleted.push(key);
    else {
      out.failed.push({ key, message: lastLine(rm.stderr) });
      out.run = rm;
    }
  }
  return out;
}

/** How a removal reads in a result message ("" when nothing was asked). */
export function describeRemoval(r: VolumeRemoval): string {
  const parts: string[] = [];
  if (r.deleted.length > 0) parts.push(`volumes removed: ${r.deleted.join(", ")}`);
  if (r.failed.length > 0) parts.push(`volumes NOT removed (data kept): ${r.failed.map((f) => `${f.key} (${f.message})`).join(", ")}`);
  return parts.length > 0 ? `; ${parts.join("; ")}` : "";
}

function lastLine(s: string): string {
  return s.trim().split("\n").pop() ?? "";
}

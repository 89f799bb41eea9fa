// Making sure the version an order names is installed, without ever changing an installed one:
//   - a named version already installed with the order's sha256 is used as it is (no download);
//     installed with another sha256 it is refused (CHECKSUM_MISMATCH), never overwritten;
//   - otherwise the artifact is fetched, checked and unpacked in a staging directory, then
//     renamed into place;
//   - "latest" always asks the source (the tarball's VERSION file names the version); when the
//     source cannot be reached the highest installed version is used, and the result says so.
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import { fetchArtifact, readArtifactVersion, unpackArtifact, verifyChecksum, type FetchedArtifact, type FetchOptions } from "./artifact.js";
import { ProcessError, isProcessError } from "./layout.js";
import { commitVersion, installedVersions, makeStaging, readVersionMeta, writeVersionMeta } from "./versions.js";

export interface Obtained {
  version: string;
  /** False when the version was installed already. */
  installedNow: boolean;
  /** "latest" fell back to the highest installed version; `offlineReason` says why. */
  resolvedOffline: boolean;
  offlineReason: string;
}

/** Installs the spec's version if needed and records the order's command for it. */
export async function obtainVersion(workDir: string, spec: ProcessSpec, opts: FetchOptions = {}): Promise<Obtained> {
  const module = spec.module;
  const sha256 = spec.sha256.toLowerCase();
  if (spec.version !== "latest" && (await installedVersions(workDir, module)).includes(spec.version)) {
    await keepInstalled(workDir, spec, spec.version, sha256);
    return { version: spec.version, installedNow: false, resolvedOffline: false, offlineReason: "" };
  }
  const staging = await makeStaging(workDir, module);
  try {
    let artifact: FetchedArtifact;
    try {
      artifact = await fetchArtifact(spec.source, staging, opts);
    } catch (e) {
      if (spec.version !== "latest" || !isProcessError(e) || e.code !== "SOURCE_UNAVAILABLE") throw e;
      return await offline(workDir, spec, e.message);
    }
    verifyChecksum(artifact, sha256);
    const tree = join(staging, "tree");
    await mkdir(tree, { mode: 0o755 });
    await unpackArtifact(artifact, tree, opts.signal);
    const version = spec.version === "latest" ? await readArtifactVersion(tree) : spec.version;
    if ((await installedVersions(workDir, module)).includes(version)) {
      await keepInstalled(workDir, spec, version, sha256);
      return { version, installedNow: false, resolvedOffline: false, offlineReason: "" };
    }
    await commitVersion(workDir, module, version, tree, { sha256, argv: spec.argv, env: spec.env, installedAt: new Date().toISOString() });
    return { version, installedNow: true, resolvedOffline: false, offlineReason: "" };
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

// An installed version is kept only when it is the same artifact; the order's command replaces
// the recorded one (a redeploy may change argv or env without changing the files).
async function keepInstalled(workDir: string, spec: ProcessSpec, version: string, sha256: string): Promise<void> {
  const meta = await readVersionMeta(workDir, spec.module, version);
  if (!meta)
    throw new ProcessError(
      "CHECKSUM_MISMATCH",
      `version ${version} of ${spec.module} is installed without a recorded sha256; it is not overwritten`,
    );
  if (meta.sha256 !== sha256) {
    throw new ProcessError(
      "CHECKSUM_MISMATCH",
      `version ${version} of ${spec.module} is installed with sha256 ${meta.sha256}, the order says ${sha256}; an installed version is never overwritten`,
    );
  }
  if (JSON.stringify([meta.argv, meta.env]) !== JSON.stringify([spec.argv, spec.env])) {
    await writeVersionMeta(workDir, spec.module, version, { ...meta, argv: spec.argv, env: spec.env });
  }
}

async function offline(workDir: string, spec: ProcessSpec, reason: string): Promise<Obtained> {
  const versions = await installedVersions(workDir, spec.module);
  const highest = versions[versions.length - 1];
  if (!highest) throw new ProcessError("SOURCE_UNAVAILABLE", `${reason}; no version of ${spec.module} is installed to fall back to`);
  const meta = await readVersionMeta(workDir, spec.module, highest);
  if (meta) await writeVersionMeta(workDir, spec.module, highest, { ...meta, argv: spec.argv, env: spec.env });
  return { version: highest, installedNow: false, resolvedOffline: true, offlineReason: reason };
}

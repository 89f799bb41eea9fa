// What a tenant's declared processes run: a process that names a process_archive artifact takes
// the version its environment's release holds (version, the archive's source, its sha256); one
// with its own spec runs that. Pure: the release was resolved by tenant-images.ts.
import { clone, create } from "@bufbuild/protobuf";
import { ProcessSpecSchema, type ProcessSpec, type TenantProcess } from "../../../gen/skipper/v1/process_pb.js";
import { archiveSourceOf } from "../../domain/process-archive.js";
import type { TenantImages } from "./tenant-images.js";

/** The process artifacts `declared` names. */
export function processArtifacts(declared: readonly TenantProcess[]): Set<string> {
  return new Set(declared.map((p) => p.artifactId).filter((a) => a !== ""));
}

/** The specs to run, sorted by module, or why one cannot be given yet (the first pending artifact's reason). */
export function tenantProcesses(
  declared: readonly TenantProcess[],
  resolved: TenantImages,
): { processes: ProcessSpec[]; pending?: string } {
  const out: ProcessSpec[] = [];
  for (const p of declared) {
    const spec = p.spec ?? create(ProcessSpecSchema);
    if (p.artifactId === "") {
      out.push(clone(ProcessSpecSchema, spec));
      continue;
    }
    const pending = resolved.pending.get(p.artifactId);
    if (pending) return { processes: [], pending };
    const v = resolved.versions.get(p.artifactId);
    const source = v && archiveSourceOf(v.reference);
    if (!v || !source) return { processes: [], pending: `artifact ${p.artifactId}: no process archive resolved` };
    out.push(
      create(ProcessSpecSchema, {
        module: spec.module,
        version: v.version,
        source,
        sha256: v.digest.replace(/^sha256:/, ""),
        argv: [...spec.argv],
        env: { ...spec.env },
      }),
    );
  }
  return { processes: out.sort((a, b) => (a.module < b.module ? -1 : a.module > b.module ? 1 : 0)) };
}

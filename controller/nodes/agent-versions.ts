// The agent versions this controller holds (resource type agent_version): an uploaded bundle's
// bytes under <data-dir>/agent-bundles/<sha256>.mjs (content-addressed, written durably before the
// resource that names them), and the resource with the manifest signed by the controller's
// Ed25519 key. A version is immutable: the same bytes again are a no-op (a retried upload), other
// bytes under a version already held are CONFLICT. The bundle the controller serves to joining
// hosts is not added by itself: upload it too (skipper agent-version add dist/skippy.mjs), so a
// rollout away from it has a version to go back to.
//
// Several controllers on one PostgreSQL store share the resources, not their data directories: a
// controller asked for bytes it does not have answers NOT_FOUND saying so (upload the bundle to
// each controller, or give each the same --agent-bundle).
import { createHash, type KeyObject } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { AgentVersionSpec } from "../../gen/skipper/v1/agent_update_pb.js";
import { signBundle } from "../../common/agent-bundle-signature.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Trace } from "../base/context.js";
import { conflict, invalid, isSkipperError, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { buildEvent } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import { writeFileAtomic } from "../tls/pem-files.js";
import { statedVersion } from "./agent-bundles.js";

/** The largest bundle taken (today's is about 3 MiB). */
export const MAX_BUNDLE_BYTES = 64 * 1024 * 1024;

const SHA256 = /^[0-9a-f]{64}$/;
/** A version an agent installs (agent/updater/update-files.ts VERSION_PATTERN). */
const VERSION = /^[A-Za-z0-9._-]{1,64}$/;

/** The download path of version `version` (boundary/agent-version-route.ts; what update_agent orders name). */
export function agentVersionPath(version: string): string {
  return `/v1/agent-versions/${encodeURIComponent(version)}/skippy.mjs`;
}

/** The spec an agent_version resource holds, or undefined. */
export function agentVersionOf(r: Resource | undefined): AgentVersionSpec | undefined {
  return r?.desiredState?.kind.case === "agentVersion" ? r.desiredState.kind.value : undefined;
}

/** Adds and reads agent versions; holds no state but where the bytes are and the signing key. */
export class AgentVersions {
  private readonly dir: string;

  constructor(
    private readonly store: Store,
    dataDir: string,
    private readonly signingKey: KeyObject,
    private readonly now: () => Date,
  ) {
    this.dir = join(dataDir, "agent-bundles");
  }

  /**
   * Adds `bytes` as version `version` (the bundle must state that version). Returns the stored
   * resource and whether this call added it. INVALID_REQUEST for a bundle that is not one,
   * CONFLICT for other bytes under a version already held.
   */
  async add(version: string, bytes: Buffer, notes: string, trace: Trace): Promise<{ resource: Resource; added: boolean }> {
    checkId(version, "version");
    if (!VERSION.test(version))
      throw invalid(`version must be 1..64 of [A-Za-z0-9._-] (what an agent can install), got ${JSON.stringify(version.slice(0, 80))}`, {
        field: "version",
      });
    if (bytes.length === 0) throw invalid("the bundle is empty", { field: "body" });
    if (bytes.length > MAX_BUNDLE_BYTES) throw invalid(`the bundle is larger than ${MAX_BUNDLE_BYTES} bytes`, { field: "body" });
    const stated = statedVersion(bytes);
    if (stated === undefined)
      throw invalid(
        'the file is not an agent bundle: its first lines state no version ("// skippy-bundle-version: X"); build one with npm run bundle:agent',
        {
          field: "body",
        },
      );
    if (stated !== version)
      throw invalid(`the bundle states version ${stated}, not ${version}: upload it as ${stated}`, { field: "version", stated });
    if (notes.length > 1024) throw invalid("notes must be at most 1024 characters", { field: "notes" });
    const manifest = signBundle(bytes, version, this.signingKey);
    const held = await this.store.getResource("agent_version", version);
    const heldSpec = agentVersionOf(held);
    if (held && heldSpec && !held.deletion) {
      if (heldSpec.sha256 !== manifest.sha256) throw differentBytes(version, heldSpec.sha256, manifest.sha256);
      // The same bytes: a retry. Put the bytes back when this controller lacks them.
      if (!(await this.has(heldSpec.sha256))) await this.writeBytes(manifest.sha256, bytes);
      return { resource: held, added: false };
    }
    await this.writeBytes(manifest.sha256, bytes);
    const at = timestampFromDate(this.now());
    const resource = create(ResourceSchema, {
      id: version,
      resourceType: "agent_version",
      schemaVersion: SCHEMA_VERSION,
      desiredState: {
        kind: {
          case: "agentVersion",
          value: { version, sha256: manifest.sha256, size: BigInt(manifest.size), signature: manifest.signature, notes },
        },
      },
      currentState: { kind: { case: "agentVersion", value: { available: true } } },
      metadata: { requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent ?? "" },
      createdAt: at,
      updatedAt: at,
    });
    try {
      const stored = await this.store.createResource(resource, (written) => [
        buildEvent({
          type: "agent_version_added",
          ...trace,
          resourceType: "agent_version",
          resourceId: version,
          revision: written.metadata?.resourceVersion,
          data: { version, sha256: manifest.sha256, size: manifest.size },
        }),
      ]);
      return { resource: stored, added: true };
    } catch (e) {
      if (!(isSkipperError(e) && e.code === "CONFLICT")) throw e;
      // Another upload of the same version won the race: the same bytes are a retry.
      const again = agentVersionOf(await this.store.getResource("agent_version", version));
      if (again && again.sha256 !== manifest.sha256) throw differentBytes(version, again.sha256, manifest.sha256);
      return { resource: (await this.store.getResource("agent_version", version))!, added: false };
    }
  }

  /** The bytes of version `version`; NOT_FOUND when it is unknown or this controller lacks them. */
  async bytesOf(version: string): Promise<{ spec: AgentVersionSpec; bytes: Buffer }> {
    checkId(version, "version");
    const r = await this.store.getResource("agent_version", version);
    const spec = agentVersionOf(r);
    if (!r || !spec || r.deletion) throw notFound("agent_version", version);
    const bytes = await this.read(spec.sha256);
    if (!bytes)
      throw notFound(
        "agent_version",
        version,
        `this controller does not hold the bytes of agent version ${version} (sha256 ${spec.sha256}): upload the bundle to it again`,
      );
    return { spec, bytes };
  }

  /** Whether the bytes of `sha256` are here and whole. */
  async has(sha256: string): Promise<boolean> {
    return (await this.read(sha256)) !== undefined;
  }

  private async read(sha256: string): Promise<Buffer | undefined> {
    if (!SHA256.test(sha256)) return undefined;
    try {
      const bytes = await readFile(join(this.dir, `${sha256}.mjs`));
      return createHash("sha256").update(bytes).digest("hex") === sha256 ? bytes : undefined;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
  }

  private async writeBytes(sha256: string, bytes: Buffer): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(join(this.dir, `${sha256}.mjs`), bytes, 0o644);
  }
}

function differentBytes(version: string, held: string, given: string) {
  return conflict(
    `agent version ${version} is held with other bytes (sha256 ${held.slice(0, 12)}…, this upload ${given.slice(0, 12)}…): versions are immutable, upload it under a new version`,
    { version, held_sha256: held, sha256: given },
  );
}

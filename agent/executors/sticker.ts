// The write_sticker and read_sticker executors: a tenant's version sticker records on the node
// what runs there (release, deployment, image digests, when), as
// <work_dir>/tenants/<tenant>/.skipper-sticker.json, so the node can answer for itself what it
// runs even when the controller's records are gone or disagree.
//
//   write: tenant from the order's target                          else STICKER_INVALID
//          no image digests given: read them from the engine        else DOCKER_UNAVAILABLE
//          (the project's containers -> the image each runs -> its repo digest, else its id)
//          written atomically, mode 0644                            -> STICKER_OK
//   read:  the file as it is                   -> STICKER_OK, STICKER_MISSING, STICKER_INVALID
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { VersionStickerSchema, type VersionSticker } from "../../gen/skipper/v1/order_action_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import { EngineError } from "../engine/project-containers.js";
import { projectDir, recordedProjectName } from "../engine/project-state.js";
import { digestOf, projectImages } from "../engine/images.js";
import { executorOf, orderOutcome } from "./executor.js";
import { writeFileAtomic } from "../engine/durable-file.js";

export const STICKER_FILE = ".skipper-sticker.json";

/** The sticker as stored on the node (snake_case, like the project state record). */
interface StickerRecord {
  schema_version: "v1";
  release_id: string;
  deployment_id: string;
  image_digests: Record<string, string>;
  written_at: string;
  tenant_id: string;
  node_id: string;
}

/** The sticker file exists but is not a v1 sticker. */
export class StickerInvalidError extends Error {
  override name = "StickerInvalidError";
}

/** Writes `sticker` as its tenant's sticker file (atomically); returns the file's path. */
export async function writeStickerFile(workDir: string, sticker: VersionSticker): Promise<string> {
  const dir = projectDir(workDir, sticker.tenantId);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const record: StickerRecord = {
    schema_version: "v1",
    release_id: sticker.releaseId,
    deployment_id: sticker.deploymentId,
    image_digests: Object.fromEntries(Object.entries(sticker.imageDigests).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    written_at: (sticker.writtenAt ? timestampDate(sticker.writtenAt) : new Date()).toISOString(),
    tenant_id: sticker.tenantId,
    node_id: sticker.nodeId,
  };
  await writeFileAtomic(join(dir, STICKER_FILE), `${JSON.stringify(record, null, 2)}\n`, { mode: 0o644 });
  return join(dir, STICKER_FILE);
}

/** The tenant's sticker, undefined when it has none; throws StickerInvalidError when unreadable. */
export async function readStickerFile(workDir: string, tenantId: string): Promise<VersionSticker | undefined> {
  let text: string;
  try {
    text = await readFile(join(projectDir(workDir, tenantId), STICKER_FILE), "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
  let r: Partial<StickerRecord>;
  try {
    r = JSON.parse(text) as Partial<StickerRecord>;
  } catch {
    throw new StickerInvalidError(`${STICKER_FILE} of tenant ${tenantId} is not JSON`);
  }
  const strings = [r.release_id, r.deployment_id, r.written_at, r.tenant_id, r.node_id];
  const digests = r.image_digests;
  const written = new Date(r.written_at ?? "");
  if (
    r.schema_version !== "v1" ||
    !strings.every((s) => typeof s === "string") ||
    typeof digests !== "object" ||
    digests === null ||
    Array.isArray(digests) ||
    !Object.values(digests).every((d) => typeof d === "string") ||
    Number.isNaN(written.getTime())
  ) {
    throw new StickerInvalidError(`${STICKER_FILE} of tenant ${tenantId} is not a v1 sticker`);
  }
  return create(VersionStickerSchema, {
    schemaVersion: "v1",
    releaseId: r.release_id,
    deploymentId: r.deployment_id,
    imageDigests: digests,
    writtenAt: timestampFromDate(written),
    tenantId: r.tenant_id,
    nodeId: r.node_id,
  });
}

/** Writes the target tenant's sticker, with digests from the engine when the order has none. */
export const writeSticker = executorOf("writeSticker", async (action, order, ctx) => {
  const started = performance.now();
  const done = (code: string, message: string, sticker?: VersionSticker) =>
    orderOutcome(code, message, started, {
      success: code === "STICKER_OK",
      retriable: code === "DOCKER_UNAVAILABLE",
      details: { sticker },
    });
  const tenantId = order.target?.tenantId ?? "";
  if (!ID_PATTERN.test(tenantId))
    return done("STICKER_INVALID", `a sticker needs the order's target tenant; got ${JSON.stringify(tenantId)}`);
  const given = action?.sticker;
  if (!given) return done("STICKER_INVALID", "the order carries no sticker (action.write_sticker.sticker)");
  let imageDigests = given.imageDigests;
  if (Object.keys(imageDigests).length === 0) {
    try {
      imageDigests = await engineDigests(await recordedProjectName(ctx.config.workDir, tenantId));
    } catch (e) {
      if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", `image digests could not be read: ${e.message}`);
      throw e;
    }
  }
  const sticker = create(VersionStickerSchema, {
    ...given,
    schemaVersion: "v1",
    imageDigests,
    writtenAt: given.writtenAt ?? timestampFromDate(new Date()),
    tenantId,
    nodeId: order.target?.nodeId ?? "",
  });
  const path = await writeStickerFile(ctx.config.workDir, sticker);
  return done("STICKER_OK", `sticker written to ${path} (${Object.keys(imageDigests).length} image digest(s))`, sticker);
});

/** Reads the target tenant's sticker back. */
export const readSticker = executorOf("readSticker", async (_action, order, ctx) => {
  const started = performance.now();
  const done = (code: string, message: string, sticker?: VersionSticker) =>
    orderOutcome(code, message, started, { success: code === "STICKER_OK", details: { sticker } });
  const tenantId = order.target?.tenantId ?? "";
  if (!ID_PATTERN.test(tenantId))
    return done("STICKER_INVALID", `a sticker needs the order's target tenant; got ${JSON.stringify(tenantId)}`);
  try {
    const sticker = await readStickerFile(ctx.config.workDir, tenantId);
    if (!sticker) return done("STICKER_MISSING", `tenant ${tenantId} has no sticker on this node`);
    return done("STICKER_OK", `release ${sticker.releaseId || "(none)"}, deployment ${sticker.deploymentId || "(none)"}`, sticker);
  } catch (e) {
    if (e instanceof StickerInvalidError) return done("STICKER_INVALID", e.message);
    throw e;
  }
});

// Service -> digest of the image its first container runs.
async function engineDigests(project: string): Promise<Record<string, string>> {
  return Object.fromEntries((await projectImages(project)).map((s) => [s.service, digestOf(s.image)]));
}

// The images a compose project's containers run, by the container's image id (a tag may have
// moved on since the container started), with the repo digests the engine recorded when it
// pulled them. Used by stickers, inspect orders and the deploy's digest check.
import { create } from "@bufbuild/protobuf";
import { ImageObservationSchema, type ImageObservation } from "../../gen/skipper/v1/order_action_pb.js";
import { EngineError, readProjectContainers } from "./project-containers.js";
import { runCommand } from "./run-command.js";

export interface ServiceImage {
  service: string;
  /** The image reference the container was created from (Config.Image). */
  reference: string;
  image: ImageObservation;
}

/** One entry per service (its first container); throws EngineError when the engine does not answer. */
export async function projectImages(project: string): Promise<ServiceImage[]> {
  const seen = await readProjectContainers(project);
  const firsts = [...seen.byService].flatMap(([service, cs]) => (cs[0] ? [{ service, container: cs[0] }] : []));
  if (firsts.length === 0) return [];
  const ids = (await engine(["container", "inspect", "--format", "{{.Image}}", ...firsts.map((f) => f.container.containerId)]))
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  const images = await inspectImages([...new Set(ids)]);
  return firsts.map((f, i) => ({
    service: f.service,
    reference: f.container.image,
    image: images.get(ids[i] ?? "") ?? create(ImageObservationSchema, { id: ids[i] ?? "" }),
  }));
}

/** Image id -> its observation. */
export async function inspectImages(ids: string[]): Promise<Map<string, ImageObservation>> {
  if (ids.length === 0) return new Map();
  const docs = JSON.parse(await engine(["image", "inspect", ...ids])) as { Id: string; RepoTags?: string[]; RepoDigests?: string[] }[];
  return new Map(
    docs.map((d) => [d.Id, create(ImageObservationSchema, { id: d.Id, repoTags: d.RepoTags ?? [], repoDigests: d.RepoDigests ?? [] })]),
  );
}

/** The digest a service's image is known by: its first repo digest, else its image id. */
export function digestOf(i: ImageObservation): string {
  return i.repoDigests[0]?.split("@")[1] ?? i.id;
}

/**
 * Services whose compose file pins the image by digest (`repo@sha256:…`) but whose container runs
 * an image the engine does not know by that digest.
 */
export function digestMismatches(images: ServiceImage[]): string[] {
  const out: string[] = [];
  for (const s of images) {
    const at = s.reference.lastIndexOf("@");
    if (at < 0) continue;
    const pinned = s.reference.slice(at + 1);
    if (!s.image.repoDigests.some((d) => d.endsWith(`@${pinned}`))) {
      out.push(`${s.service}: pinned ${pinned}, runs ${s.image.repoDigests.join(", ") || s.image.id}`);
    }
  }
  return out;
}

async function engine(args: string[]): Promise<string> {
  const run = await runCommand("docker", args, { timeoutMs: 30_000, uncapped: true });
  if (run.exitCode !== 0) throw new EngineError(run);
  return run.stdout;
}

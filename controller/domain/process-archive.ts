// What a version of a process-archive artifact is: its reference is the artifact's url_template
// with "{version}" replaced (an http(s) URL, or an absolute path on the nodes), its digest the
// archive's sha256. A release holds references of both kinds of artifact; which kind one is shows
// in its form, since the controller writes them: an image reference is "<repository>@sha256:…"
// (never starting with '/' or a URL scheme), an archive's is a path or an http(s) URL.
import { create } from "@bufbuild/protobuf";
import { ProcessSourceSchema, type ProcessSource } from "../../gen/skipper/v1/process_pb.js";

export const VERSION_PLACEHOLDER = "{version}";

/** The reference of version `version` of an archive whose template is `template`. */
export function archiveReference(template: string, version: string): string {
  return template.replaceAll(VERSION_PLACEHOLDER, version);
}

/** The process source a release reference names, or undefined when it is an image reference. */
export function archiveSourceOf(reference: string): ProcessSource | undefined {
  if (reference.startsWith("/")) return create(ProcessSourceSchema, { kind: { case: "path", value: reference } });
  if (/^https?:\/\//.test(reference)) return create(ProcessSourceSchema, { kind: { case: "url", value: reference } });
  return undefined;
}

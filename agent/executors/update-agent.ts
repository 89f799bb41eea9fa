// update_agent: hands another version of this agent's bundle to skippy-updater. The executor
// downloads the bundle from the controller it talks to (the path the order names, over its own
// mutual-TLS connection), checks its size, SHA-256 and the controller's Ed25519 signature, stages
// it under <state-dir>/updater/versions/ and writes request.json (agent/updater/update-files.ts).
// The updater does the rest: switches, restarts this agent, and goes back by itself when the new
// version does not reach the controller within the order's deadline. The order succeeds once the
// request is written; whether the new version took is what the node's heartbeats say next
// (NodeStatus.agent_update), which the controller's rollout follows.
//
// The signing key is the controller's, fetched once over the authenticated connection and pinned
// in <updater>/signing-key.pub: a later key that differs is refused (SIGNING_KEY_CHANGED) rather
// than trusted. An agent not run by the updater refuses the order (UPDATER_ABSENT): nothing would
// switch or restart it. Idempotent: a version already running is a success without a download,
// one already staged is not downloaded again.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { durationMs } from "@bufbuild/protobuf/wkt";
import { bundleMismatch } from "../../common/agent-bundle-signature.js";
import type { UpdateAgentAction } from "../../gen/skipper/v1/agent_update_pb.js";
import {
  BUNDLE_SHA256_ENV,
  SHA256_PATTERN,
  UPDATER_DIR_ENV,
  VERSION_PATTERN,
  bundlePathOf,
  readManifest,
  sha256File,
  stageBundle,
  versionDirName,
  writeFileWhole,
  writeUpdateRequest,
} from "../updater/update-files.js";
import { executorOf, orderOutcome, type ExecContext } from "./executor.js";

const MAX_BUNDLE_BYTES = 64 * 1024 * 1024;
const DEFAULT_DEADLINE_MS = 120_000;

export const updateAgent = executorOf("updateAgent", async (action, order, ctx) => {
  const started = performance.now();
  const fail = (code: string, message: string, retriable = false) => orderOutcome(code, message, started, { success: false, retriable });
  const dir = process.env[UPDATER_DIR_ENV];
  if (!dir)
    return fail(
      "UPDATER_ABSENT",
      "this agent does not run under skippy-updater, so nothing would switch or restart it: reinstall it with `skippy install` (its unit runs `skippy updater`)",
    );
  const bad = checkAction(action);
  if (bad || !action) return fail("INVALID_ORDER", bad ?? "the order carries no update_agent action");
  const details = (already: boolean, staged: string) => ({
    agentUpdate: { fromVersion: ctx.agentVersion ?? "", toVersion: action.version, stagedPath: staged, alreadyPresent: already },
  });
  if (process.env[BUNDLE_SHA256_ENV] === action.sha256)
    return orderOutcome("ALREADY_RUNNING", `agent version ${action.version} already runs here`, started, {
      success: true,
      details: details(true, ""),
    });
  const name = versionDirName(action.version, action.sha256);
  const staged = await alreadyStaged(dir, name, action.sha256);
  if (!staged) {
    const got = await fetchBundle(ctx, dir, action);
    if ("code" in got) return fail(got.code, got.message, got.retriable);
    await stageBundle(dir, got.bytes, {
      version: action.version,
      sha256: action.sha256,
      size: Number(action.size),
      signature: action.signature,
    });
  }
  const deadlineMs = action.deadline ? durationMs(action.deadline) : DEFAULT_DEADLINE_MS;
  // Cancelled meanwhile (the rollout rolled back or was superseded): stage, but never switch.
  if (ctx.signal.aborted)
    return fail("CANCELLED", `the order was cancelled before agent version ${action.version} was handed to the updater`);
  await writeUpdateRequest(dir, {
    version: action.version,
    sha256: action.sha256,
    deadlineMs,
    orderId: order.id,
    requestedAt: new Date().toISOString(),
  });
  ctx.log.info(
    { action: "agent_update_requested", result: "ok", metadata: { version: action.version, sha256: action.sha256, staged: !staged } },
    `agent version ${action.version} staged; skippy-updater switches to it`,
  );
  return orderOutcome(
    "UPDATE_REQUESTED",
    `agent version ${action.version} staged for skippy-updater (deadline ${deadlineMs} ms)`,
    started,
    {
      success: true,
      details: details(staged, bundlePathOf(dir, name)),
    },
  );
});

function checkAction(a: UpdateAgentAction | undefined): string | undefined {
  if (!a) return "the order carries no update_agent action";
  if (!VERSION_PATTERN.test(a.version)) return `version ${JSON.stringify(a.version)} is not [A-Za-z0-9._-]{1,64}`;
  if (!SHA256_PATTERN.test(a.sha256)) return "sha256 is not 64 lowercase hex digits";
  if (a.size <= 0n || a.size > BigInt(MAX_BUNDLE_BYTES)) return `size must be 1..${MAX_BUNDLE_BYTES} bytes`;
  if (!/^\/v1\/agent-versions\/[A-Za-z0-9._-]+\/skippy\.mjs$/.test(a.downloadPath))
    return `download_path ${JSON.stringify(a.downloadPath)} is not /v1/agent-versions/<version>/skippy.mjs`;
  return undefined;
}

// A complete staged copy (manifest written last) whose bytes still hash as named.
async function alreadyStaged(dir: string, name: string, sha256: string): Promise<boolean> {
  const m = await readManifest(dir, name).catch(() => undefined);
  if (!m || m.sha256 !== sha256) return false;
  return (await sha256File(bundlePathOf(dir, name)).catch(() => "")) === sha256;
}

type Fetched = { bytes: Buffer } | { code: string; message: string; retriable: boolean };

// Downloads and checks the bundle against the order's manifest and the pinned signing key.
async function fetchBundle(ctx: ExecContext, dir: string, a: UpdateAgentAction): Promise<Fetched> {
  const controller = ctx.controller;
  if (!controller?.download) return { code: "AGENT_ERROR", message: "this agent cannot download from its controller", retriable: false };
  const key = await signingKey(ctx, dir);
  if ("code" in key) return key;
  let res: Awaited<ReturnType<NonNullable<typeof controller.download>>>;
  try {
    res = await controller.download(a.downloadPath, { signal: ctx.signal, maxBytes: MAX_BUNDLE_BYTES });
  } catch (e) {
    return { code: "DOWNLOAD_FAILED", message: `downloading ${a.downloadPath}: ${(e as Error).message}`, retriable: true };
  }
  if (res.status !== 200) {
    const why = res.body.toString("utf8").slice(0, 300);
    return { code: "DOWNLOAD_FAILED", message: `${a.downloadPath} answered ${res.status}: ${why}`, retriable: res.status >= 500 };
  }
  const mismatch = bundleMismatch(
    res.body,
    { version: a.version, sha256: a.sha256, size: Number(a.size), signature: a.signature },
    key.key,
  );
  if (mismatch) return { code: "BUNDLE_REJECTED", message: `agent version ${a.version} was refused: ${mismatch}`, retriable: false };
  return { bytes: res.body };
}

// The controller's bundle signing key: pinned in the updater directory on first use.
async function signingKey(ctx: ExecContext, dir: string): Promise<{ key: string } | { code: string; message: string; retriable: boolean }> {
  const pinFile = join(dir, "signing-key.pub");
  const pinned = (await readFile(pinFile, "utf8").catch(() => "")).trim();
  let served = "";
  try {
    served = (await ctx.controller!.bundles.getAgentBundle({}, { signal: ctx.signal })).signingPublicKey;
  } catch (e) {
    if (pinned) return { key: pinned };
    return { code: "DOWNLOAD_FAILED", message: `reading the controller's signing key: ${(e as Error).message}`, retriable: true };
  }
  if (pinned && served && served !== pinned)
    return {
      code: "SIGNING_KEY_CHANGED",
      message: `the controller's bundle signing key changed (pinned ${pinned.slice(0, 12)}…, served ${served.slice(0, 12)}…): remove ${pinFile} on this host if the change is intended`,
      retriable: false,
    };
  if (!pinned && served) await writeFileWhole(pinFile, `${served}\n`, 0o644);
  const key = pinned || served;
  return key ? { key } : { code: "BUNDLE_REJECTED", message: "the controller states no signing key", retriable: false };
}

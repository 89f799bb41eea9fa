// The one-file agent and CLI (scripts/bundle-agent.mjs and bundle-cli.mjs, what `npm run
// bundle:agent` and `bundle:cli` run), built into a directory the test gives, so each test runs
// the bundle of the code it checks out.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";

const scriptOf = (name: string) => fileURLToPath(new URL(`../../scripts/${name}`, import.meta.url));

/** Builds the agent's bundle as <dir>/skippy.mjs and returns its path. */
export async function buildAgentBundle(dir: string): Promise<string> {
  const out = join(dir, "skippy.mjs");
  await execa(process.execPath, [scriptOf("bundle-agent.mjs"), out]);
  return out;
}

/** Builds the CLI's bundle as <dir>/skipper.mjs and returns its path. */
export async function buildCliBundle(dir: string): Promise<string> {
  const out = join(dir, "skipper.mjs");
  await execa(process.execPath, [scriptOf("bundle-cli.mjs"), out]);
  return out;
}

/** The PATH systemd gives a system service: the bundle runs with Node and nothing of the test's environment. */
export const SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

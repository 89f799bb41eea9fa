// The one-file agent (scripts/bundle-agent.mjs, what `npm run bundle:agent` runs), built into a
// directory the test gives, so each test runs the bundle of the code it checks out.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";

const SCRIPT = fileURLToPath(new URL("../../scripts/bundle-agent.mjs", import.meta.url));

/** Builds the bundle as <dir>/skippy.mjs and returns its path. */
export async function buildAgentBundle(dir: string): Promise<string> {
  const out = join(dir, "skippy.mjs");
  await execa(process.execPath, [SCRIPT, out]);
  return out;
}

/** The PATH systemd gives a system service: the bundle runs with Node and nothing of the test's environment. */
export const SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

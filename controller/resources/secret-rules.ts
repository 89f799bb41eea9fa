// The shape of references to secret values, checked when a tenant or service is written (that the
// secrets exist, belong to the tenant and hold the values is references.ts's part): variable and
// file names a node can use, ids and value names that can name something, and no variable given
// both a literal value and a secret one.
import type { SecretKeyRef } from "../../gen/skipper/v1/secret_pb.js";
import { COMPOSE_STEERING_ENV, ENV_KEY, SECRET_FILE_NAME, SECRET_VALUE_NAME } from "../../common/action-rules.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";

const MAX_REFS = 256;

/** Checks `secret_env` (beside the literal `env`) and `secret_files` under `field`. */
export function checkSecretRefs(
  field: string,
  env: Record<string, string>,
  secretEnv: Record<string, SecretKeyRef>,
  secretFiles: Record<string, SecretKeyRef>,
): void {
  if (Object.keys(secretEnv).length + Object.keys(secretFiles).length > MAX_REFS)
    throw invalid(`${field}: at most ${MAX_REFS} secret references`, { field: `${field}.secret_env` });
  for (const [name, ref] of Object.entries(secretEnv)) {
    const at = `${field}.secret_env.${name}`;
    if (!ENV_KEY.test(name))
      throw invalid(`${field}.secret_env: ${JSON.stringify(name.slice(0, 64))} is not a variable name`, { field: at });
    if (name in env) throw invalid(`${name} is set in both env and secret_env`, { field: at });
    if (COMPOSE_STEERING_ENV.test(name))
      throw invalid(`${name} would steer Compose itself (it gets secret variables in its environment)`, { field: at });
    checkRef(at, ref);
  }
  for (const [name, ref] of Object.entries(secretFiles)) {
    const at = `${field}.secret_files.${name}`;
    if (!SECRET_FILE_NAME.test(name))
      throw invalid(`${field}.secret_files: ${JSON.stringify(name.slice(0, 64))} must match ${SECRET_FILE_NAME.source}`, { field: at });
    checkRef(at, ref);
  }
}

function checkRef(at: string, ref: SecretKeyRef): void {
  checkId(ref.secretId, `${at}.secret_id`);
  if (!SECRET_VALUE_NAME.test(ref.key)) throw invalid(`${at}.key must name a value of the secret`, { field: `${at}.key` });
}

// The join script a host runs in one line (GET /v1/join.sh, controller/boundary/agent-bundle-route.ts):
//
//   curl -fsS --pinnedpubkey sha256//<pin> -k https://CONTROLLER/v1/join.sh | SKIPPER_JOIN_TOKEN=TOKEN sh -s -- [skippy join options]
//
// The token travels in the environment, never in a command's arguments (process lists show
// those): the script hands it on to skippy join the same way. A token as the first argument
// (the line as it was printed before) is still taken, with a warning.
// curl trusts the controller by the pin alone (-k: no CA yet; --pinnedpubkey: only the key of
// its certificate). The script holds the controller's URL as the host reached it, that pin, and
// the served bundle's manifest and signing key; it downloads the bundle under the same pin,
// checks its size, SHA-256 and Ed25519 signature with Node (node:crypto, the statement of
// common/agent-bundle-signature.ts) BEFORE running any of it, then runs `node skippy.mjs join`,
// which enrolls, installs and starts the service. Needs Node 20+ and curl on the host.
import type { BundleManifest } from "../../common/agent-bundle-signature.js";

// Node code the script runs on the downloaded file: argv is file, version, sha256, size,
// signature, key. No single quote inside (it sits in one in the script).
const VERIFY_JS = [
  "const [,f,v,h,n,s,k]=process.argv;",
  'const c=require("node:crypto"),b=require("node:fs").readFileSync(f);',
  'const no=(m)=>{process.stderr.write("join.sh: the downloaded agent bundle is refused: "+m+". Nothing was installed.\\n");process.exit(1);};',
  'if(b.length!==Number(n))no("its size is "+b.length+" bytes, the controller signed "+n);',
  'const d=c.createHash("sha256").update(b).digest("hex");',
  'if(d!==h)no("its SHA-256 is "+d+", the controller signed "+h);',
  'const key=c.createPublicKey({key:{kty:"OKP",crv:"Ed25519",x:Buffer.from(k,"base64").toString("base64url")},format:"jwk"});',
  'const st="skipper-agent-bundle/v1\\nversion="+v+"\\nsha256="+h+"\\nsize="+n+"\\n";',
  'if(!c.verify(null,Buffer.from(st),key,Buffer.from(s,"base64")))no("its signature does not verify with the controller key");',
].join("");

/** The join script for a host that reached the controller at `url`; `pin` is "SHA256:<base64>". */
export function joinScript(opts: { url: string; pin: string; manifest: BundleManifest; signingPublicKey: string }): string {
  const { url, pin, manifest: m, signingPublicKey } = opts;
  const b64 = pin.replace(/^SHA256:/, "");
  // Every embedded value is one word of a known alphabet: nothing for the shell to read into.
  for (const [what, v] of Object.entries({ url, pin, version: m.version, signature: m.signature, key: signingPublicKey }))
    if (!/^[A-Za-z0-9+/=:._\-[\]]+$/.test(v)) throw new Error(`the join script cannot hold this ${what}: ${v}`);
  return `#!/bin/sh
# Joins this host to the Skipper controller at ${url}, which served this script:
#   curl -fsS --pinnedpubkey sha256//${b64} -k ${url}/v1/join.sh | SKIPPER_JOIN_TOKEN=TOKEN sh -s -- [skippy join options]
# Downloads skippy ${m.version} under the same pin, checks its SHA-256 and the controller's
# Ed25519 signature before running any of it, then runs: node skippy.mjs join ${url} ...
# with the token in its environment (never in its arguments: process lists show those).
# Needs curl and Node.js 20 or later. Run it as root (it installs a systemd service).
set -eu
URL='${url}'
PIN='sha256//${b64}'
FINGERPRINT='${pin}'
VERSION='${m.version}'
SHA256='${m.sha256}'
SIZE='${m.size}'
SIGNATURE='${m.signature}'
SIGNING_KEY='${signingPublicKey}'
TOKEN=\${SKIPPER_JOIN_TOKEN:-}
if [ -z "$TOKEN" ] && [ "$#" -ge 1 ] && [ "\${1#-}" = "$1" ]; then
  echo "join.sh: the token as an argument shows in process lists; pass it as SKIPPER_JOIN_TOKEN=... sh -s -- instead" >&2
  TOKEN=$1
  shift
fi
if [ -z "$TOKEN" ]; then
  echo "usage: curl ... ${url}/v1/join.sh | SKIPPER_JOIN_TOKEN=TOKEN sh -s -- [skippy join options]" >&2
  exit 2
fi
if ! command -v node >/dev/null 2>&1; then
  echo "join.sh: this host needs Node.js 20 or later (node on the PATH) to run skippy: install it and run the line again" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
curl -fsS --pinnedpubkey "$PIN" -k -o "$dir/skippy.mjs" "$URL/v1/agent-bundle/skippy.mjs"
node -e '${VERIFY_JS}' "$dir/skippy.mjs" "$VERSION" "$SHA256" "$SIZE" "$SIGNATURE" "$SIGNING_KEY"
SKIPPER_JOIN_TOKEN=$TOKEN
export SKIPPER_JOIN_TOKEN
node "$dir/skippy.mjs" join "$URL" --fingerprint "$FINGERPRINT" "$@"
`;
}

/** The URL a request reached the controller by, from its authority, when it is a plain host[:port]. */
export function urlOfAuthority(authority: string | undefined): string | undefined {
  if (!authority || !/^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/.test(authority)) return undefined;
  return `https://${authority}`;
}

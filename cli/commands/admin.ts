// `skipper whoami`, `skipper admin-token rotate` and `skipper secret-keys rotate`: the caller as
// the controller sees it, and the controller's own secrets (admins). A new admin token is printed
// once on stdout; the old one is refused from the next call, so log in again with the new one.
import type { Command } from "commander";
import { ActorKind, Role } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { SecretService } from "../../gen/skipper/v1/secret_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { enumName } from "../output.js";

/** `skipper whoami`, `skipper admin-token rotate`, `skipper secret-keys rotate`. */
export function registerAdmin(program: Command, ctx: CommandContext): void {
  const whoami = program
    .command("whoami")
    .description("the credential as the controller sees it: who, which role, which tenants")
    .addHelpText("after", "\nExample:\n  $ skipper whoami")
    .action(async () => {
      const res = await ctx.clients().access.whoAmI({});
      const a = res.actor;
      const kind = enumName(ActorKind, a?.kind ?? 0)
        .toLowerCase()
        .replace(/_/g, " ");
      const scope = [...(res.scope?.tenantIds ?? []), ...(res.scope?.tenantSelector ? [res.scope.tenantSelector] : [])];
      ctx.io.out(`${kind}${a?.name || a?.id ? ` ${a.name || a.id}` : ""}, role ${enumName(Role, a?.role ?? 0).toLowerCase()}`);
      ctx.io.out(`tenants: ${scope.length > 0 ? scope.join(" or ") : "all"}`);
    });
  calls(whoami, AccessService.method.whoAmI);

  const adminToken = program.command("admin-token").description("the controller's bootstrap admin token (admin)");
  const rotate = adminToken
    .command("rotate")
    .description("replace the admin token; the new one is printed once, on stdout, and the old one is refused from the next call")
    .addHelpText(
      "after",
      `
Refused when the controller takes its token from SKIPPER_ADMIN_TOKEN: change it there. Log in
again with the new token (\`skipper login ... --token-stdin\`): the saved context holds the old one.

Example:
  $ skipper admin-token rotate > admin.token && skipper login --server https://127.0.0.1:8443 --ca-file data/tls/ca.crt --token-file admin.token`,
    )
    .action(async () => {
      const res = await ctx.clients().access.rotateAdminToken({});
      ctx.io.err("Admin token rotated. The new one follows on stdout, shown only now; the old one is refused from now on.");
      ctx.io.out(res.adminToken);
    });
  calls(rotate, AccessService.method.rotateAdminToken);

  const keys = program.command("secret-keys").description("the key ring that seals secret values at rest (admin)");
  const rotateKeys = keys
    .command("rotate")
    .description("put a new key first, re-seal every secret and webhook with it, then drop the old key")
    .addHelpText(
      "after",
      `
With --secret-keys-file the keys are yours: put the new key on the file's first line (on every
controller) before rotating; the README's Secrets section says more.

Example:
  $ skipper secret-keys rotate`,
    )
    .action(async () => {
      const res = await ctx.clients().secrets.rotateSecretKeys({});
      ctx.io.out(
        `Sealing with key ${res.keyId}: ${res.resealedSecrets} secret(s) and ${res.resealedWebhooks} webhook(s) re-sealed` +
          `${res.retiredKeyIds.length > 0 ? `, key(s) ${res.retiredKeyIds.join(", ")} retired` : ""}.`,
      );
    });
  calls(rotateKeys, SecretService.method.rotateSecretKeys);
}

// The CLI covers the contract: every RPC of every service generated in gen/ either has a command
// that declares it calls it (cli/command-rpcs.ts, read from the program itself) or is listed in
// cli/api-only.ts with why, and the README's "API only" paragraph names each of those. A new RPC
// without a command fails here until someone writes one or says why it is for the API only.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DescService } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { API_ONLY } from "../cli/api-only.js";
import { declaredRpcs, rpcName } from "../cli/command-rpcs.js";
import { EXIT_OK } from "../cli/errors.js";
import { buildProgram, run } from "../cli/program.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const GEN = join(ROOT, "gen/skipper/v1");

/** Every service descriptor the generated *_service_pb.ts files export. */
async function contractServices(): Promise<DescService[]> {
  const services: DescService[] = [];
  for (const f of readdirSync(GEN)
    .filter((n) => n.endsWith("_service_pb.ts"))
    .sort()) {
    const mod = (await import(join(GEN, f))) as Record<string, unknown>;
    for (const v of Object.values(mod)) {
      if (typeof v === "object" && v !== null && (v as { kind?: string }).kind === "service") services.push(v as DescService);
    }
  }
  return services;
}

function program() {
  const io = { out: () => {}, err: () => {}, color: false, env: {}, readStdin: async () => "" };
  return buildProgram({
    io,
    exitCode: EXIT_OK,
    globals: () => ({}),
    clients: () => {
      throw new Error("no calls here");
    },
  });
}

describe("the CLI covers the API", () => {
  it("every RPC of the contract has a command or a documented reason to be API only", async () => {
    const services = await contractServices();
    expect(services.length).toBeGreaterThanOrEqual(12);
    const rpcs = services.flatMap((s) => s.methods.map(rpcName));
    const covered = declaredRpcs(program());
    const missing = rpcs.filter((r) => !covered.has(r) && API_ONLY[r] === undefined);
    expect(missing, "RPCs with neither a command (calls() in cli/commands) nor an entry in cli/api-only.ts").toEqual([]);
    // The lists stay true: nothing API-only has a command, and nothing named is gone from the contract.
    expect(
      Object.keys(API_ONLY).filter((r) => covered.has(r)),
      "API-only RPCs that have a command",
    ).toEqual([]);
    expect(
      [...covered.keys(), ...Object.keys(API_ONLY)].filter((r) => !rpcs.includes(r)),
      "names not in the contract",
    ).toEqual([]);
  });

  it("the README's API-only paragraph names exactly the API-only RPCs", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const paragraph = /^\*\*API only\.\*\*[\s\S]*?(?=\n\n)/m.exec(readme)?.[0] ?? "";
    expect(paragraph, "README.md has a paragraph starting **API only.**").not.toBe("");
    const named = new Set([...paragraph.matchAll(/`(\w+Service)\.(\w+)`/g)].map((m) => `skipper.v1.${m[1]}/${m[2]}`));
    expect([...named].sort()).toEqual(Object.keys(API_ONLY).sort());
  });

  it("a command's help ends with the RPCs it calls", async () => {
    const out: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => out.push(t), color: false, env: {}, readStdin: async () => "" };
    expect(await run(["deploy", "--help"], io)).toBe(EXIT_OK);
    expect(out.join("\n")).toMatch(/\nAPI: DeploymentService\.Apply, WorkOrderService\.GetWorkOrder$/);
    const node = program().commands.find((c) => c.name() === "node")!;
    expect(declaredRpcs(node).get("skipper.v1.NodeService/RegisterNode")).toEqual(["register"]);
  });
});

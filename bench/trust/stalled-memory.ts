// Memory held by stalled streams: 100 gRPC streams that each announce a 4 MiB message, send 1 KiB
// and never finish, first without a credential (on a call that needs one and on the public health
// check), then with a node's token (admitted, so the server reads what arrives until its idle limit
// cuts it). Measured: the controller's RSS while they are held, against its RSS before, and how
// many were answered at once rather than held. Before the front door admitted calls from headers,
// each such stream held 80-85 MB and 60 of them killed the controller.
import http2 from "node:http2";
import { join } from "node:path";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { atMost, exactly, fmt, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";

const SECTION = "stalled streams";
const STREAMS = 100;
const ANNOUNCED = 4 * 1024 * 1024;

export const stalledMemoryProbe: Probe = {
  name: "stalled-memory",
  async run({ workDir, log }) {
    const ctl = await startController({ dataDir: join(workDir, "data") });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: "stall-node" })).token;
    const figures: Figure[] = [];
    const cases: [string, string, Record<string, string>, number, number][] = [
      ["no credential, admin call", "/skipper.v1.ResourceService/ListResources", {}, ANNOUNCED, 0],
      ["no credential, public health check", "/skipper.v1.HealthService/Check", {}, ANNOUNCED, 0],
      // Admitted, and under the cap: the body is read as it arrives (64 KiB each) and held until
      // the request idle limit cuts the stream.
      ["node token, admitted call", "/skipper.v1.NodeService/Heartbeat", { authorization: `Bearer ${token}` }, 1024 * 1024, 64 * 1024],
    ];
    for (const [name, path, headers, announced, extra] of cases) {
      const before = ctl.rssMb();
      const held = await stall(ctl, path, headers, announced, extra);
      const during = ctl.rssMb();
      log(`${name}: ${held.answered} answered at once, RSS ${fmt(before)} -> ${fmt(during)} MB`);
      figures.push(
        info(
          SECTION,
          `${name}: ${STREAMS} streams announcing ${announced / 1024 / 1024} MiB`,
          `${held.answered} answered at once, ${STREAMS - held.answered} held`,
        ),
        atMost(SECTION, `${name}: RSS while held, above before`, Math.max(0, Math.round(during - before)), extra > 0 ? 64 : 16, "MB"),
      );
      held.close();
    }
    figures.push(exactly(SECTION, "controller down afterwards", ctl.alive() ? 0 : 1, 0));
    await ctl.stop();
    return figures;
  },
};

/** Opens the streams on one connection and resolves once each was answered or its bytes were sent. */
async function stall(
  ctl: ControllerProcess,
  path: string,
  headers: Record<string, string>,
  announced: number,
  extra: number,
): Promise<{ answered: number; close(): void }> {
  const session = http2.connect(ctl.url, { ca: ctl.ca });
  session.on("error", () => undefined);
  let answered = 0;
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(announced, 1);
  const body = Buffer.concat([prefix, Buffer.alloc(1024 + extra, 0x61)]);
  await Promise.all(
    Array.from(
      { length: STREAMS },
      () =>
        new Promise<void>((resolve) => {
          const s = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", ...headers });
          s.on("error", () => resolve());
          s.on("response", (h) => {
            if (h["grpc-status"] !== undefined) {
              answered++;
              resolve();
            }
          });
          s.on("data", () => undefined);
          // Held: everything sent has been handed to the socket (the server has it or will).
          s.write(body, () => resolve());
        }),
    ),
  );
  // One round trip more, so the server has read what was sent before memory is measured.
  await new Promise<void>((r) => session.ping(() => r()));
  return { answered, close: () => session.destroy() };
}

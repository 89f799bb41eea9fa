// One HTTPS request to a controller process exactly as written (no URL normalisation, unlike
// fetch), trusting its CA: for what a browser or curl would send.
import { request } from "node:https";
import type { ControllerProcess } from "./processes.js";

export interface RawAnswer {
  status: number;
  headers: Record<string, unknown>;
  body: string;
}

export function rawRequest(
  ctl: ControllerProcess,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<RawAnswer> {
  const u = new URL(ctl.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, method, ca: ctl.ca, headers }, (r) => {
      let text = "";
      r.setEncoding("utf8");
      r.on("data", (c: string) => {
        text += c;
      });
      r.on("end", () => resolve({ status: r.statusCode ?? 0, headers: r.headers, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

// Assertion helpers for RPC errors: the machine-readable skipper code carried as a detail.
import { ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../../gen/skipper/v1/envelope_pb.js";

/** Awaits `p`, expecting it to fail; returns the ApiError code, Connect code and details. */
export async function rpcError(
  p: Promise<unknown>,
): Promise<{ code: string; connectCode: number; message: string; details: Record<string, unknown>; err: ConnectError }> {
  try {
    await p;
  } catch (e) {
    const err = ConnectError.from(e);
    const detail = err.findDetails(ApiErrorSchema)[0];
    return {
      code: detail?.code ?? "(no ApiError detail)",
      connectCode: err.code,
      message: err.rawMessage,
      details: (detail?.details ?? {}) as Record<string, unknown>,
      err,
    };
  }
  throw new Error("expected the call to fail, it succeeded");
}

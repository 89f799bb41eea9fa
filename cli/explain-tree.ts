// `skipper explain`: the chain ExplainResource returns, drawn as a tree. The desired state at its
// revision is the root's first branch; each work order hangs under its node with its claim and
// result; what the node observed follows; the rollout with the nodes it holds; last the verdict.
// The step in the way is marked `<- blocking` (and red on a terminal): the verdict when the
// resource is not converged, and the result or rollout step the verdict points at. Pure.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ExplainStepKind, type ExplainResourceResponse, type ExplainStep } from "../gen/skipper/v1/resource_service_pb.js";
import { paint, type Io } from "./io.js";
import { enumName } from "./output.js";

interface Node {
  text: string;
  blocking?: boolean;
  children: Node[];
}

/** The tree's lines. */
export function explainTree(res: ExplainResourceResponse, io: Pick<Io, "color">): string[] {
  const r = res.resource;
  const status = res.convergence?.status ?? ConvergenceStatus.UNSPECIFIED;
  const converged = status === ConvergenceStatus.CONVERGED;
  const blockers = converged ? new Set<ExplainStep>() : blockingSteps(res);
  const line = (s: ExplainStep) => ({ text: stepText(s), blocking: blockers.has(s), children: [] as Node[] });

  const root: Node[] = [];
  const byNode = new Map<string, Node>();
  const nodeBranch = (nodeId: string) => {
    let n = byNode.get(nodeId);
    if (!n) {
      n = { text: `node ${nodeId}`, children: [] };
      byNode.set(nodeId, n);
      root.push(n);
    }
    return n;
  };
  const orders = new Map<string, Node>();
  let rollout: Node | undefined;
  for (const s of res.steps) {
    switch (s.kind) {
      case ExplainStepKind.WORK_ORDER: {
        const n = line(s);
        orders.set(s.workOrderId, n);
        (s.nodeId ? nodeBranch(s.nodeId).children : root).push(n);
        break;
      }
      case ExplainStepKind.CLAIM:
      case ExplainStepKind.RESULT:
        (orders.get(s.workOrderId)?.children ?? root).push(line(s));
        break;
      case ExplainStepKind.OBSERVED:
        (s.nodeId ? nodeBranch(s.nodeId).children : root).push(line(s));
        break;
      case ExplainStepKind.ROLLOUT:
        if (!s.nodeId || !rollout) {
          rollout = line(s);
          root.push(rollout);
        } else rollout.children.push(line(s));
        break;
      default:
        root.push(line(s));
    }
  }
  // The verdict ends the chain, whatever its time.
  const verdictAt = root.findIndex((n) => n.text.startsWith("verdict"));
  if (verdictAt >= 0) root.push(...root.splice(verdictAt, 1));
  const head = `${r?.resourceType ?? "resource"}/${r?.id ?? ""}  ${enumName(ConvergenceStatus, status)}`;
  const out = [converged ? paint(io, "green", head) : paint(io, "bold", head)];
  draw(root, "", out, io);
  return out;
}

function draw(nodes: Node[], prefix: string, out: string[], io: Pick<Io, "color">): void {
  nodes.forEach((n, i) => {
    const last = i === nodes.length - 1;
    const text = n.blocking ? paint(io, "red", `${n.text}  <- blocking`) : n.text;
    out.push(`${prefix}${last ? "└─ " : "├─ "}${text}`);
    draw(n.children, `${prefix}${last ? "   " : "│  "}`, out, io);
  });
}

// The verdict, and the step it names: the failed result of its work order, or the rollout step
// of its node.
function blockingSteps(res: ExplainResourceResponse): Set<ExplainStep> {
  const out = new Set<ExplainStep>();
  const verdict = res.steps.find((s) => s.kind === ExplainStepKind.VERDICT);
  if (!verdict) return out;
  out.add(verdict);
  const c = res.convergence;
  const result = c?.workOrderId ? res.steps.find((s) => s.kind === ExplainStepKind.RESULT && s.workOrderId === c.workOrderId) : undefined;
  if (result && !/_OK$/.test(result.code)) out.add(result);
  if (c?.status === ConvergenceStatus.ROLLOUT_WAITING) {
    const held = res.steps.find((s) => s.kind === ExplainStepKind.ROLLOUT && s.nodeId !== "" && s.nodeId === c.nodeId);
    if (held) out.add(held);
  }
  return out;
}

const KIND_WORD: Partial<Record<ExplainStepKind, string>> = {
  [ExplainStepKind.DESIRED]: "desired",
  [ExplainStepKind.WORK_ORDER]: "order",
  [ExplainStepKind.CLAIM]: "claim",
  [ExplainStepKind.RESULT]: "result",
  [ExplainStepKind.OBSERVED]: "observed",
  [ExplainStepKind.VERDICT]: "verdict",
  [ExplainStepKind.ROLLOUT]: "rollout",
};

function stepText(s: ExplainStep): string {
  const at = s.at
    ? `  (${timestampDate(s.at)
        .toISOString()
        .replace(/\.\d{3}Z$/, "Z")})`
    : "";
  const order = s.kind === ExplainStepKind.WORK_ORDER && s.workOrderId ? ` [${s.workOrderId}]` : "";
  return `${KIND_WORD[s.kind] ?? "step"}: ${s.summary}${order}${at}`;
}

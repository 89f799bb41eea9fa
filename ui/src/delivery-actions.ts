// What an operator may decide from the delivery view: approve a waiting release, pin an environment
// on a release it runs or ran, unpin it, mark a version bad. Each asks why first (recorded with who
// did it), then calls DeliveryService as `skipper delivery` does; what happened stays on the page
// (the notice below) across the renders that events cause, until the next action.
import type { Api } from "./api.js";
import { problemOf } from "./api-problem.js";
import { h } from "./dom.js";

/** Whether the signed-in caller may decide here: the OPERATE permission over every tenant (environments are the fleet's). */
export interface Caller {
  operates: boolean;
}

/** One decision: the button's words, the question asked, and the call once answered. */
interface Action {
  label: string;
  testId: string;
  question: string;
  done: string;
  call: (reason: string) => Promise<unknown>;
}

/** What the last action did, or why it was refused: kept across renders. */
export const notice = h("p", { role: "status", "data-testid": "delivery-notice", hidden: "" });

function say(text: string, failed: boolean): void {
  notice.textContent = text;
  notice.className = failed ? "error" : "muted";
  notice.hidden = false;
}

// A button that asks why, then acts; an empty or cancelled answer does nothing.
function button(a: Action, after: () => void): HTMLElement {
  return h(
    "button",
    {
      type: "button",
      class: "action",
      "data-testid": a.testId,
      onclick: () => {
        const reason = prompt(a.question)?.trim();
        if (!reason) return say(`${a.label}: nothing done (a reason is required).`, true);
        say(`${a.label}…`, false);
        a.call(reason).then(
          () => {
            say(a.done, false);
            after();
          },
          (e) => say(`${a.label} failed: ${problemOf(e, "Deciding for an environment needs the operator role over every tenant.")}`, true),
        );
      },
    },
    a.label,
  );
}

/** The decisions on a delivery, bound to the API; `after` draws the page again. */
export function deliveryActions(api: Api, after: () => void) {
  const d = api.delivery;
  return {
    approve: (env: string, releaseId: string) =>
      button(
        {
          label: "Approve",
          testId: "approve",
          question: `Why approve ${releaseId} for ${env}?`,
          done: `Approved ${releaseId} for ${env}.`,
          call: (reason) => d.approveRelease({ id: env, releaseId, reason }),
        },
        after,
      ),
    pin: (env: string, releaseId: string) =>
      button(
        {
          label: "Pin",
          testId: "pin",
          question: `Why pin ${env} to ${releaseId}? Nothing is promoted there until it is unpinned.`,
          done: `Pinned ${env} to ${releaseId}.`,
          call: (reason) => d.pinEnvironment({ id: env, releaseId, reason }),
        },
        after,
      ),
    unpin: (env: string) =>
      button(
        {
          label: "Unpin",
          testId: "unpin",
          question: `Why unpin ${env}? Promotion there resumes.`,
          done: `Unpinned ${env}: promotion resumes.`,
          call: (reason) => d.unpinEnvironment({ id: env, reason }),
        },
        after,
      ),
    markBad: (artifactId: string, version: string) =>
      button(
        {
          label: "Mark bad",
          testId: "mark-bad",
          question: `Why mark ${artifactId} ${version} bad? It is never promoted again, and environments running it go back.`,
          done: `Marked ${artifactId} ${version} bad.`,
          call: (reason) => d.markVersionBad({ artifactId, version, reason }),
        },
        after,
      ),
  };
}

export type DeliveryActions = ReturnType<typeof deliveryActions>;

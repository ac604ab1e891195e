// The rollout browser's query filters and the dead-letter payload preview: pure functions over the index
// entries and bytes, so they are tested without a server.
import type { GroupEntry } from "./run-data.js";

const NUMBER = /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/;
/** Rewards within this of each other count as one outcome (a group with no learning signal). */
const SAME = 1e-9;

/**
 * A predicate over scored groups from query parameters: env, step, stepMin, stepMax, version (the batch's
 * oldest policy version), minReward / maxReward (bounds on the group's mean reward) and outcome (`mixed`:
 * rewards differ, `uniform`: all the same). Returns a one-line error for a malformed parameter.
 */
export function groupFilter(q: Record<string, string | undefined>): ((g: GroupEntry) => boolean) | string {
  const tests: ((g: GroupEntry) => boolean)[] = [];
  const num = (name: string): number | null | string => {
    const v = q[name];
    if (v === undefined || v === "") return null;
    return NUMBER.test(v) ? Number(v) : `${name} must be a number (got ${JSON.stringify(v)})`;
  };
  const env = q["env"];
  if (env) tests.push((g) => g.env === env);
  for (const [name, test] of [
    ["step", (g: GroupEntry, x: number) => g.step === x],
    ["stepMin", (g: GroupEntry, x: number) => g.step >= x],
    ["stepMax", (g: GroupEntry, x: number) => g.step <= x],
    ["version", (g: GroupEntry, x: number) => g.policyVersion === x],
    ["minReward", (g: GroupEntry, x: number) => g.rewardMean !== null && g.rewardMean >= x],
    ["maxReward", (g: GroupEntry, x: number) => g.rewardMean !== null && g.rewardMean <= x],
  ] as const) {
    const x = num(name);
    if (typeof x === "string") return x;
    if (x !== null) tests.push((g) => test(g, x));
  }
  const outcome = q["outcome"];
  if (outcome) {
    if (outcome !== "mixed" && outcome !== "uniform") return `outcome must be mixed or uniform (got ${JSON.stringify(outcome)})`;
    const mixed = (g: GroupEntry) => g.rewardMin !== null && g.rewardMax !== null && g.rewardMax - g.rewardMin > SAME;
    tests.push(outcome === "mixed" ? mixed : (g) => g.rewardMin !== null && !mixed(g));
  }
  return (g) => tests.every((t) => t(g));
}

/** The first bytes of a dead letter's payload as text (non-printables escaped) and hex, for a person to read. */
export function payloadPreview(bytes: Uint8Array, max = 512): { bytes: number; text: string; hex: string; truncated: boolean } {
  const head = bytes.subarray(0, max);
  let text = "";
  for (const b of head) text += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : b === 0x0a ? "\n" : `\\x${b.toString(16).padStart(2, "0")}`;
  const hex = Array.from(head.subarray(0, 64), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return { bytes: bytes.length, text, hex, truncated: bytes.length > max };
}

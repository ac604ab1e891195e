// Per-token policy versions of a rollout: which policy version sampled each completion token, as spans
// [{version, start, end}) over completion-token positions (the shape SGLang returns). An engine that takes new
// weights between decode steps samples one completion under several versions; the row's policy_version_min is
// its oldest, which staleness accounting and the learner's bound use.
import type { VersionSpan } from "../environments/api/model.js";

export type { VersionSpan };

/**
 * Why `spans` cannot describe this completion, or null: each span non-empty and inside the completion, in
 * order without overlap, its version within [min, max], the two ends reached, and every sampled token (mask 1)
 * inside a span. An empty list says nothing (a producer from before spans): it is always accepted.
 */
export function versionSpansProblem(
  spans: readonly VersionSpan[],
  completion: { length: number; mask: ArrayLike<number>; min: number; max: number },
): string | null {
  if (spans.length === 0) return null;
  let end = 0;
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (const [k, s] of spans.entries()) {
    if (![s.version, s.start, s.end].every(Number.isInteger)) return `span ${k}: version, start and end must be integers`;
    if (s.start < end || s.end <= s.start || s.end > completion.length)
      return `span ${k} [${s.start}, ${s.end}) is empty, overlaps the one before, or passes the completion's ${completion.length} tokens`;
    if (s.version < completion.min || s.version > completion.max)
      return `span ${k} has version ${s.version}, outside policy versions ${completion.min}..${completion.max}`;
    lo = Math.min(lo, s.version);
    hi = Math.max(hi, s.version);
    end = s.end;
  }
  if (lo !== completion.min || hi !== completion.max) return `spans cover versions ${lo}..${hi}, but the row says ${completion.min}..${completion.max}`;
  const uncovered = firstUncovered(spans, completion.mask);
  return uncovered < 0 ? null : `sampled token ${uncovered} is in no version span`;
}

function firstUncovered(spans: readonly VersionSpan[], mask: ArrayLike<number>): number {
  let k = 0;
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] !== 1) continue;
    while (k < spans.length && spans[k]!.end <= i) k++;
    if (k === spans.length || spans[k]!.start > i) return i;
  }
  return -1;
}

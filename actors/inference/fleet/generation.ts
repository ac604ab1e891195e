// One Generation from the segments a server returned. A generation is cut into segments when a server aborts
// it (a weight update with abort, a pause) or dies: the rest is resubmitted as prompt + tokens so far, and each
// segment keeps the version that sampled it, so the spans say exactly which weights drew which token. Stop
// strings are matched here on token ids (the same encoding the local engine stops on), never on re-tokenised text.
import type { Generation, VersionSpan } from "../../../environments/api/model.js";
import type { TokenizerLike } from "../../../environments/api/tokenizer.js";
import type { Segment } from "./engine-server.js";

export class GenerationBuilder {
  readonly tokenIds: number[] = [];
  readonly logprobs: number[] = [];
  readonly spans: VersionSpan[] = [];

  /**
   * Appends a segment; its tokens take the server's own spans when they cover it exactly, else `stamped`: the
   * version the fleet had loaded on that server when it sent the request (the fleet sends nothing to a server
   * while it updates it, and its updates abort or drain what is in flight, so one version sampled the segment).
   */
  append(seg: Segment, stamped: number): void {
    const offset = this.tokenIds.length;
    const n = seg.tokenIds.length;
    this.tokenIds.push(...seg.tokenIds);
    this.logprobs.push(...seg.logprobs);
    if (n === 0) return;
    const own = seg.versionSpans && coversExactly(seg.versionSpans, n) ? seg.versionSpans : [{ version: stamped, start: 0, end: n }];
    for (const s of own) pushSpan(this.spans, { version: s.version, start: s.start + offset, end: s.end + offset });
  }

  /**
   * The Generation: cut after the first stop token or stop sequence, and why it ended. `budget` is maxTokens
   * capped by the room left in the context window.
   */
  finish(opts: {
    maxTokens: number;
    budget: number;
    serverStopped: boolean;
    stopTokenIds: readonly number[];
    stopSequences: readonly number[][];
    tokenizer: TokenizerLike;
    versionIfEmpty: number;
  }): Generation {
    const cut = firstStop(this.tokenIds, opts.stopTokenIds, opts.stopSequences);
    const end = cut ? cut.end : this.tokenIds.length;
    const tokenIds = this.tokenIds.slice(0, end);
    const spans = clipSpans(this.spans, end);
    let stopReason: Generation["stopReason"];
    if (cut) stopReason = cut.reason;
    else if (opts.serverStopped) stopReason = "eos";
    else if (end >= opts.maxTokens) stopReason = "length";
    else stopReason = end >= opts.budget ? "context" : "length";
    const policyVersion = spans[0]?.version ?? opts.versionIfEmpty;
    return {
      tokenIds,
      logprobs: this.logprobs.slice(0, end),
      text: opts.tokenizer.decode(tokenIds, { skipSpecial: true }),
      stopReason,
      policyVersion,
      ...(spans.length > 1 ? { versionSpans: spans } : {}),
    };
  }
}

function coversExactly(spans: readonly VersionSpan[], n: number): boolean {
  let at = 0;
  for (const s of spans) {
    if (s.start !== at || s.end <= s.start) return false;
    at = s.end;
  }
  return at === n;
}

function pushSpan(spans: VersionSpan[], s: VersionSpan): void {
  const last = spans[spans.length - 1];
  if (last && last.version === s.version && last.end === s.start) last.end = s.end;
  else spans.push({ ...s });
}

function clipSpans(spans: readonly VersionSpan[], end: number): VersionSpan[] {
  return spans.filter((s) => s.start < end).map((s) => ({ ...s, end: Math.min(s.end, end) }));
}

/** The end (exclusive) of the earliest stop token or stop sequence in `ids`, and which it was. */
export function firstStop(
  ids: readonly number[],
  stopTokenIds: readonly number[],
  stopSequences: readonly number[][],
): { end: number; reason: "eos" | "stop" } | null {
  const stops = new Set(stopTokenIds);
  for (let i = 0; i < ids.length; i++) {
    if (stops.has(ids[i]!)) return { end: i + 1, reason: "eos" };
    for (const seq of stopSequences) {
      if (seq.length === 0 || seq.length > i + 1) continue;
      if (seq.every((t, k) => ids[i + 1 - seq.length + k] === t)) return { end: i + 1, reason: "stop" };
    }
  }
  return null;
}

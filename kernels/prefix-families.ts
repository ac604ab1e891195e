// Which samples share a token prefix, and how long a prefix, for group-prefix packing (kernels.h, seg_parent).
//
// A family's shared prefix is laid out once and each member continues it as a child segment, so the family costs
// L + sum(len_i - L) tokens instead of sum(len_i). L is the longest common prefix of the members' token sequences,
// cut at the first token any member trains on (a token in the shared prefix is computed once, so it cannot carry
// each member's own loss; a child's FIRST token can, predicted by the prefix's last row). The G completions of a
// single-turn group share their prompt; multi-turn rows share whatever history they have in common.
//
// Families are found on the rows sorted by their tokens, where rows with long common prefixes sit next to each
// other: a run of sorted rows shares the minimum of its neighbours' common prefixes, and a dynamic program picks
// the runs that save the most tokens (one level: a member is never itself a prefix for others).

export interface PrefixSeq {
  /** The tokens the sample is computed on (already cut to the context). */
  tokens: Int32Array;
  /** Index of the first token it trains on (its length when none). */
  firstLoss: number;
}

export interface Family {
  /** Sample indices, ascending. */
  members: number[];
  /** Shared prefix length (0 for a family of one). */
  prefix: number;
}

function lcp(a: Int32Array, b: Int32Array): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

function compareSeqs(a: Int32Array, b: Int32Array): number {
  const i = lcp(a, b);
  if (i < a.length && i < b.length) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** Families in order of their first member; every sample index appears in exactly one. */
export function prefixFamilies(seqs: PrefixSeq[]): Family[] {
  const n = seqs.length;
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => compareSeqs(seqs[a]!.tokens, seqs[b]!.tokens) || a - b);
  // share[k]: the prefix sorted rows k and k + 1 could share (capped at both rows' first loss token).
  const share = order.slice(0, -1).map((a, k) => {
    const b = order[k + 1]!;
    return Math.min(lcp(seqs[a]!.tokens, seqs[b]!.tokens), seqs[a]!.firstLoss, seqs[b]!.firstLoss);
  });
  // best[e]: the most tokens saved by families over sorted rows [0, e); cut[e]: where the last family starts.
  const best = new Float64Array(n + 1);
  const cut = new Int32Array(n + 1);
  for (let e = 1; e <= n; e++) {
    best[e] = best[e - 1]!;
    cut[e] = e - 1;
    let L = Infinity;
    for (let s = e - 2; s >= 0; s--) {
      L = Math.min(L, share[s]!);
      if (L === 0) break;
      const saved = best[s]! + (e - s - 1) * L;
      if (saved > best[e]!) {
        best[e] = saved;
        cut[e] = s;
      }
    }
  }
  const families: Family[] = [];
  for (let e = n; e > 0; e = cut[e]!) {
    const s = cut[e]!;
    const members = order.slice(s, e).sort((a, b) => a - b);
    let prefix = 0;
    if (members.length > 1) {
      prefix = Infinity;
      for (let k = s; k < e - 1; k++) prefix = Math.min(prefix, share[k]!);
    }
    families.push({ members, prefix });
  }
  return families.sort((a, b) => a.members[0]! - b.members[0]!);
}

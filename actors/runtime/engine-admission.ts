// Which waiting requests the policy engine hands to the kernels' engine next. The native engine admits first come
// first served; holding requests here until there is room lets one task's burst (a group of 8 and its later turns)
// not lock every other task out of the batch. "fair" is round robin between owners (the client that asked: one per
// task, or per evaluated rollout): the owner with the fewest sequences in flight goes first, among equals the one
// admitted least recently, then the oldest request. A group that does not fit waits at the head, so nothing behind
// it can starve it.

export type Admission = "fair" | "fcfs";

export interface Waiting {
  /** Requests with equal keys become one engine request (one prompt prefilled once). */
  key: string;
  owner: number;
}

/** Where an owner stands: sequences in the engine, and when it was last admitted (a counter; -1 never). */
export interface Standing {
  inFlight: number;
  lastAdmitted: number;
}

/**
 * Waiting requests as engine requests in arrival order: equal keys together, in chunks of at most maxSeqs (the
 * engine refuses a group larger than the sequences it may run).
 */
export function groupWaiting<R extends Waiting>(waiting: R[], maxSeqs: number): R[][] {
  const open = new Map<string, R[]>();
  const groups: R[][] = [];
  for (const r of waiting) {
    let g = open.get(r.key);
    if (!g || g.length >= maxSeqs) {
      g = [];
      open.set(r.key, g);
      groups.push(g);
    }
    g.push(r);
  }
  return groups;
}

/** The index of the group to admit next, or -1 when none waits. */
export function nextGroup<R extends Waiting>(groups: R[][], standing: (owner: number) => Standing, policy: Admission): number {
  if (groups.length === 0) return -1;
  if (policy === "fcfs") return 0;
  let best = 0;
  let bestStanding = standing(groups[0]![0]!.owner);
  for (let i = 1; i < groups.length; i++) {
    const s = standing(groups[i]![0]!.owner);
    if (before(s, bestStanding)) [best, bestStanding] = [i, s];
  }
  return best;
}

function before(a: Standing, b: Standing): boolean {
  return a.inFlight !== b.inFlight ? a.inFlight < b.inFlight : a.lastAdmitted < b.lastAdmitted;
}

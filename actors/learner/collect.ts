// Gathers one optimizer step's samples from the scored stream, in stream order, dropping (and
// counting) samples staler than maxOffPolicySteps. Shared by the learner and `rollstream replay`,
// so a replay sees exactly what the run saw.
import type { JsMsg } from "@nats-io/jetstream";
import type { RolloutRow } from "../../streams/rollout-schema.js";
import type { StreamReader } from "../../streams/stream-reader.js";

export interface CollectedBatch {
  kept: RolloutRow[];
  dropped: number;
  stalenessMean: number;
  stalenessMax: number;
}

export async function collectBatch(
  reader: StreamReader,
  version: number,
  opts: { batchSize: number; maxOffPolicySteps: number },
  decode: (msg: JsMsg) => Promise<RolloutRow[]>,
  signal?: AbortSignal,
  waitMs = 1000,
  giveUpAfterIdleMs = Infinity,
  /** Called each time a wait for more samples came back empty, with how many are still missing. */
  onIdle?: (missing: number) => Promise<void> | void,
): Promise<CollectedBatch | null> {
  const kept: RolloutRow[] = [];
  let dropped = 0, staleSum = 0, staleMax = 0;
  let idleSince = Date.now();
  while (kept.length < opts.batchSize) {
    if (signal?.aborted) return null;
    const msg = await reader.next(waitMs, signal);
    if (!msg) {
      if (Date.now() - idleSince > giveUpAfterIdleMs) return null;
      await onIdle?.(opts.batchSize - kept.length);
      continue;
    }
    idleSince = Date.now();
    for (const row of await decode(msg)) {
      const staleness = version - row.policyVersionMin;
      if (staleness > opts.maxOffPolicySteps) {
        dropped++;
        continue;
      }
      staleSum += staleness;
      staleMax = Math.max(staleMax, staleness);
      kept.push(row);
    }
  }
  return { kept, dropped, stalenessMean: staleSum / Math.max(1, kept.length), stalenessMax: staleMax };
}

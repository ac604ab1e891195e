// Which messages an actor started and never finished. A message that kills its actor (a native crash,
// an out-of-memory kill, a bug the input triggers, a hang the launcher ends) is redelivered to the
// restarted actor, which dies again: without a memory of earlier attempts that crash-loops the actor
// until its launcher gives up and the run fails. The ledger is that memory, in the run's
// `rs-<run>-attempts` KV bucket (so it survives the process, and `nats kv ls` shows it): an entry is
// written when an attempt starts and deleted when it ends, whatever the outcome, so an entry that is
// still there when the message comes back counts an attempt that died with its actor.
import type { KV } from "@nats-io/kv";
import { z } from "zod";
import { retryInfrastructure } from "./infrastructure-error.js";

const AttemptSchema = z.object({
  /** Attempts that started and never ended. */
  unfinished: z.number().int().nonnegative(),
  /** Who started the latest one, and when (ISO time). */
  by: z.string(),
  at: z.string(),
  /** What the work was (subject and sequence, or a step and its batches), for people reading the bucket. */
  what: z.string(),
});
export type AttemptRecord = z.infer<typeof AttemptSchema>;

/** Attempts of one piece of work that ended with their actor; by default the work is set aside after two. */
export const DEFAULT_CRASH_LIMIT = 2;

export class AttemptLedger {
  constructor(
    private readonly kv: () => Promise<KV>,
    /** Whose attempts (a consumer's durable name, "learner"): keys are `<scope>.<id>`. */
    private readonly scope: string,
  ) {}

  private key(id: string): string {
    return `${this.scope}.${id.replace(/[^A-Za-z0-9_=-]/g, "_")}`;
  }

  /** Reads how many earlier attempts died unfinished, and records this one as started. */
  async begin(id: string, by: string, what: string): Promise<number> {
    const kv = await this.kv();
    const key = this.key(id);
    const e = await retryInfrastructure(() => kv.get(key));
    let prior = 0;
    if (e?.operation === "PUT" && e.value.length > 0) {
      const r = AttemptSchema.safeParse(safeJson(e.value));
      // A value we cannot read counts as one unfinished attempt: it was written for this key.
      prior = r.success ? r.data.unfinished : 1;
    }
    const rec: AttemptRecord = { unfinished: prior + 1, by, at: new Date().toISOString(), what };
    await retryInfrastructure(() => kv.put(key, JSON.stringify(rec)));
    return prior;
  }

  /** The attempt ended (done, failed and handled, or set aside): forget it. */
  async end(id: string): Promise<void> {
    const kv = await this.kv();
    await retryInfrastructure(() => kv.delete(this.key(id)));
  }

  /** The unfinished attempts recorded for `id` (0 when none). */
  async unfinished(id: string): Promise<number> {
    const kv = await this.kv();
    const e = await retryInfrastructure(() => kv.get(this.key(id)));
    if (e?.operation !== "PUT" || e.value.length === 0) return 0;
    const r = AttemptSchema.safeParse(safeJson(e.value));
    return r.success ? r.data.unfinished : 1;
  }
}

function safeJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

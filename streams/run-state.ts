// Typed access to the run's KV bucket: every key has a schema (state-keys.ts), values are validated on
// put and on get, so a foreign or corrupt value is an error that names the key instead of a bad cast.
// Such an error is about the run's state, not about any message or the server: StateValueError says which
// bucket and key hold what, so a reader can report it as such and fall back on what the streams say.
import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import { formatIssues } from "./msgpack-codec.js";
import { retryInfrastructure } from "./infrastructure-error.js";
import { StateKeys, StateKeySchemas, type StateKey, type StateValue } from "./state-keys.js";

/** A KV value that is not JSON or does not match its key's schema (written by hand, or by a foreign writer). */
export class StateValueError extends Error {
  override readonly name = "StateValueError";
  constructor(
    message: string,
    readonly key: StateKey,
    /** The value as stored, as text (cut to 80 characters); "" for a refused put. */
    readonly raw: string,
    /** The entry's revision in the bucket (0 for a refused put): a reader reports one bad value once. */
    readonly revision = 0,
    /** What is wrong with it, in a few words ("not valid JSON"). */
    readonly reason = "",
  ) {
    super(message);
  }
}

/** Text of a stored value for a message: quoted, cut to 80 characters. */
export function shownValue(bytes: Uint8Array): string {
  const text = new TextDecoder().decode(bytes);
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 79)}…` : text);
}

function parseValue<K extends StateKey>(key: K, bytes: Uint8Array, where: { bucket: string; revision: number }): StateValue<K> {
  const raw = shownValue(bytes);
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new StateValueError(`run state: KV ${where.bucket} ${key} is not valid JSON (${raw})`, key, raw, where.revision, "not valid JSON");
  }
  const r = StateKeySchemas[key].safeParse(parsed);
  if (!r.success) {
    const reason = `does not match its schema (${formatIssues(r.error)})`;
    throw new StateValueError(`run state: KV ${where.bucket} ${key} = ${raw} ${reason}`, key, raw, where.revision, reason);
  }
  return r.data as StateValue<K>;
}

/** One key as stored: its valid value, or why it is not one; with the entry's revision (for compare-and-set). */
export type StateRead<K extends StateKey> = { bucket: string; revision: number } & ({ value: StateValue<K> } | { error: StateValueError });

export class RunState {
  /**
   * `retryDelaysMs`: back-off for reads and puts that meet a leader election or a restarting server (actors
   * pass INFRA_RETRY_DELAYS_MS). Tools that watch a run (train's monitor, doctor, the dashboard) keep the
   * default, none: they report the outage at once and poll again.
   */
  constructor(
    readonly kv: KV,
    private readonly retryDelaysMs: readonly number[] = [],
  ) {}

  async get<K extends StateKey>(key: K): Promise<StateValue<K> | undefined> {
    const e = await retryInfrastructure(() => this.kv.get(key), this.retryDelaysMs);
    if (e?.operation !== "PUT" || e.value.length === 0) return undefined;
    return parseValue(key, e.value, e);
  }

  /** The key as stored, without throwing on a bad value; undefined when it is absent (never written, or deleted). */
  async read<K extends StateKey>(key: K): Promise<StateRead<K> | undefined> {
    const e = await retryInfrastructure(() => this.kv.get(key), this.retryDelaysMs);
    if (e?.operation !== "PUT" || e.value.length === 0) return undefined;
    try {
      return { bucket: e.bucket, revision: e.revision, value: parseValue(key, e.value, e) };
    } catch (err) {
      if (err instanceof StateValueError) return { bucket: e.bucket, revision: e.revision, error: err };
      throw err;
    }
  }

  async put<K extends StateKey>(key: K, value: StateValue<K>): Promise<void> {
    const data = this.encode(key, value);
    // Putting one value twice is harmless; an actor dying of a leader election is not.
    await retryInfrastructure(() => this.kv.put(key, data), this.retryDelaysMs);
  }

  /**
   * Replaces the value stored at `revision` (compare-and-set): false when the key changed since — its owner wrote
   * it meanwhile, and its value wins. `value` undefined deletes the key (absent is a valid state for most keys).
   */
  async replace<K extends StateKey>(key: K, revision: number, value: StateValue<K> | undefined): Promise<boolean> {
    try {
      if (value === undefined) await this.kv.delete(key, { previousSeq: revision });
      else await this.kv.update(key, this.encode(key, value), revision);
      return true;
    } catch (e) {
      if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamWrongLastSequence) return false;
      throw e;
    }
  }

  private encode<K extends StateKey>(key: K, value: StateValue<K>): string {
    const r = StateKeySchemas[key].safeParse(value);
    if (!r.success) throw new StateValueError(`refusing to write KV key ${key}: ${formatIssues(r.error)}`, key, "");
    return JSON.stringify(r.data);
  }

  policyVersion(): Promise<number> {
    return this.get(StateKeys.policyVersion).then((v) => v ?? -1);
  }

  learnerStep(): Promise<number> {
    return this.get(StateKeys.learnerStep).then((v) => v ?? 0);
  }

  /**
   * Calls fn with every valid value of `key` as it changes (starting with the current one). The watch
   * outlives its consumer: when the server holding it goes away (a killed cluster member) the iterator
   * may end, throw, or just go quiet. So a direct read every `checkMs` compares revisions: a change the
   * watch missed is delivered and the watch is started again (a new watch delivers the current value first).
   */
  async watch<K extends StateKey>(
    key: K,
    fn: (value: StateValue<K>) => void,
    signal?: AbortSignal,
    onInvalid?: (e: Error) => void,
    checkMs = 5_000,
  ): Promise<void> {
    let lastRevision = 0;
    const deliver = (e: KvEntry) => {
      if (e.revision <= lastRevision) return;
      lastRevision = e.revision;
      try {
        fn(parseValue(key, e.value, e));
      } catch (err) {
        onInvalid?.(err as Error); // a foreign writer: reported, skipped
      }
    };
    let it = await this.kv.watch({ key });
    const check = setInterval(() => {
      this.kv
        .get(key)
        .then((e) => {
          if (e?.operation !== "PUT" || e.revision <= lastRevision) return;
          deliver(e);
          it.stop(); // it missed a change: replace it
        })
        .catch(() => undefined);
    }, checkMs);
    check.unref();
    signal?.addEventListener(
      "abort",
      () => {
        clearInterval(check);
        it.stop();
      },
      { once: true },
    );
    (async () => {
      while (!signal?.aborted) {
        try {
          for await (const e of it) if (e.operation === "PUT") deliver(e);
        } catch {
          // the watch's consumer failed: start another below
        }
        if (signal?.aborted) break;
        await new Promise((r) => setTimeout(r, 500));
        try {
          it = await this.kv.watch({ key });
        } catch {
          // the server is still away: try again on the next turn (the for-await on a stopped iterator ends at once)
        }
      }
    })().catch(() => undefined);
  }
}

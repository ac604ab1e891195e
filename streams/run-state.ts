// Typed access to the run's KV bucket: every key has a schema (state-keys.ts), values are validated on
// put and on get, so a foreign or corrupt value is an error that names the key instead of a bad cast.
import type { KV } from "@nats-io/kv";
import { formatIssues } from "./msgpack-codec.js";
import { retryInfrastructure } from "./infrastructure-error.js";
import { StateKeys, StateKeySchemas, type StateKey, type StateValue } from "./state-keys.js";

export class StateValueError extends Error {
  override readonly name = "StateValueError";
}

function parseValue<K extends StateKey>(key: K, bytes: Uint8Array): StateValue<K> {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new StateValueError(`KV key ${key} does not hold JSON`);
  }
  const r = StateKeySchemas[key].safeParse(raw);
  if (!r.success) throw new StateValueError(`KV key ${key}: ${formatIssues(r.error)}`);
  return r.data as StateValue<K>;
}

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
    return parseValue(key, e.value);
  }

  async put<K extends StateKey>(key: K, value: StateValue<K>): Promise<void> {
    const r = StateKeySchemas[key].safeParse(value);
    if (!r.success) throw new StateValueError(`refusing to write KV key ${key}: ${formatIssues(r.error)}`);
    // Putting one value twice is harmless; an actor dying of a leader election is not.
    await retryInfrastructure(() => this.kv.put(key, JSON.stringify(r.data)), this.retryDelaysMs);
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
    const deliver = (revision: number, bytes: Uint8Array) => {
      if (revision <= lastRevision) return;
      lastRevision = revision;
      try {
        fn(parseValue(key, bytes));
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
          deliver(e.revision, e.value);
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
          for await (const e of it) if (e.operation === "PUT") deliver(e.revision, e.value);
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

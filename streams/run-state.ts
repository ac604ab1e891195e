// Typed access to the run's KV bucket. Values are JSON so `nats kv get rs-<run>-state policy.version`
// prints something a person can read.
import type { KV } from "@nats-io/kv";
import { StateKeys } from "./subjects.js";

export class RunState {
  constructor(readonly kv: KV) {}

  async getJson<T>(key: string): Promise<T | undefined> {
    const e = await this.kv.get(key);
    if (!e || e.operation !== "PUT" || e.value.length === 0) return undefined;
    try {
      return JSON.parse(new TextDecoder().decode(e.value)) as T;
    } catch {
      throw new Error(`KV key ${key} does not hold JSON`);
    }
  }

  async putJson(key: string, value: unknown): Promise<void> {
    await this.kv.put(key, JSON.stringify(value));
  }

  async getNumber(key: string, fallback: number): Promise<number> {
    const v = await this.getJson<unknown>(key);
    return typeof v === "number" ? v : fallback;
  }

  policyVersion(): Promise<number> {
    return this.getNumber(StateKeys.policyVersion, -1);
  }

  learnerStep(): Promise<number> {
    return this.getNumber(StateKeys.learnerStep, 0);
  }

  /** Calls fn with every numeric value of `key` as it changes (starting with the current one). */
  async watchNumber(key: string, fn: (value: number) => void, signal?: AbortSignal): Promise<void> {
    const it = await this.kv.watch({ key });
    signal?.addEventListener("abort", () => it.stop(), { once: true });
    (async () => {
      for await (const e of it) {
        if (e.operation !== "PUT") continue;
        try {
          const v = JSON.parse(new TextDecoder().decode(e.value));
          if (typeof v === "number") fn(v);
        } catch {
          /* a foreign writer; ignore */
        }
      }
    })().catch(() => undefined);
  }
}

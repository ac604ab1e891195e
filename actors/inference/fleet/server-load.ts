// How loaded an inference server is, from its Prometheus /metrics, and the in-flight cap the fleet keeps for it.
// The gauges are the ones each server exports (vLLM: vllm:num_requests_running / _waiting, vllm:kv_cache_usage_perc
// or the older vllm:gpu_cache_usage_perc; SGLang: sglang:num_running_reqs, sglang:num_queue_reqs,
// sglang:token_usage; rollstream serve: rollstream_serve_*), summed over their label sets (one per engine or rank).
// A server that queues requests runs no faster for more of them: they only wait there, on weights that get older.
// So the cap falls to what the server runs at once while it queues (or its KV is nearly full), and grows again by a
// quarter while the fleet is held back by it and the server has room, up to maxInFlightPerServer.
import { call } from "./http.js";

export interface ServerLoad {
  running: number;
  waiting: number;
  /** Share of the KV cache in use, 0..1; null when the server does not say. */
  kvUsage: number | null;
}

export interface LoadGauges {
  running: string;
  waiting: string;
  kvUsage: readonly string[];
}

export const LOAD_GAUGES: Record<"sglang" | "vllm" | "rollstream", LoadGauges> = {
  sglang: { running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs", kvUsage: ["sglang:token_usage"] },
  vllm: { running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting", kvUsage: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"] },
  rollstream: {
    running: "rollstream_serve_num_requests_running",
    waiting: "rollstream_serve_num_requests_waiting",
    kvUsage: ["rollstream_serve_kv_cache_usage_perc"],
  },
};

/** Each metric's samples summed over label sets, from a Prometheus text exposition (comments and bad lines skipped). */
export function metricSums(text: string): Map<string, number> {
  const sums = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line.trim());
    if (!m) continue;
    const v = Number(m[3]);
    if (Number.isFinite(v)) sums.set(m[1]!, (sums.get(m[1]!) ?? 0) + v);
  }
  return sums;
}

/** The server's load from its metrics text; null when it exports neither the running nor the waiting gauge. */
export function loadOf(text: string, g: LoadGauges): ServerLoad | null {
  const sums = metricSums(text);
  if (!sums.has(g.running) && !sums.has(g.waiting)) return null;
  const kv = g.kvUsage.find((n) => sums.has(n));
  return { running: sums.get(g.running) ?? 0, waiting: sums.get(g.waiting) ?? 0, kvUsage: kv === undefined ? null : sums.get(kv)! };
}

/** GET <url>/metrics as a load; null when it has no such route or gauges (the cap then stays where it is). */
export async function fetchLoad(url: string, g: LoadGauges, deadlineMs: number): Promise<ServerLoad | null> {
  const text = await call(`${url}/metrics`, undefined, { deadlineMs }).catch(() => null);
  return text === null ? null : loadOf(text, g);
}

/** The next in-flight cap for a server: see the top of this file. `heldBack`: the fleet had requests at the cap. */
export function nextCap(cap: number, load: ServerLoad, max: number, heldBack: boolean): number {
  const kvFull = load.kvUsage !== null && load.kvUsage >= 0.95;
  if (load.waiting > 0 || kvFull) return Math.max(1, Math.min(cap, Math.round(load.running)));
  if (heldBack && (load.kvUsage === null || load.kvUsage < 0.9)) return Math.min(max, cap + Math.max(1, Math.floor(cap / 4)));
  return cap;
}

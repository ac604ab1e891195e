// The inference engine's figures for people (heartbeat, Prometheus): the engine's counters as of its last step,
// and the decode rate over a sliding window. The engine is read only between steps (it is not thread-safe), so
// figures() answers from that snapshot, never from the engine while a step runs.
import type { EngineStats } from "../../kernels/index.js";
import type { EngineFigures } from "../../streams/index.js";
import type { ActorContext } from "./actor.js";
import type { Health } from "./heartbeat.js";

const WINDOW_MS = 5_000;

export class EngineMeter {
  private last: EngineStats | null = null;
  private samples: Array<{ t: number; tokens: number }> = [];

  constructor(private readonly now: () => number = () => performance.now()) {}

  observe(stats: EngineStats): void {
    const t = this.now();
    this.last = stats;
    this.samples.push({ t, tokens: stats.tokensGenerated });
    while (this.samples.length > 2 && this.samples[0]!.t < t - WINDOW_MS) this.samples.shift();
  }

  /** The engine's counters as of its last step (null before the engine exists). */
  get stats(): EngineStats | null {
    return this.last;
  }

  /** `held`: requests the scheduler holds back (not yet in the engine), counted as waiting. */
  figures(held = 0): EngineFigures {
    const s = this.last;
    if (!s) {
      return {
        running: 0,
        waiting: held,
        kvBlocksUsed: 0,
        kvBlocksCached: 0,
        kvBlocksFree: 0,
        decodeTokensPerSec: 0,
        prefixHitRate: 0,
        preemptions: 0,
        version: 0,
      };
    }
    return {
      running: s.running,
      waiting: s.waiting + held,
      kvBlocksUsed: s.blocksUsed,
      kvBlocksCached: s.blocksCachedIdle,
      kvBlocksFree: s.blocksFree,
      decodeTokensPerSec: this.rate(),
      prefixHitRate: s.promptTokens > 0 ? Math.min(1, (s.prefixHitTokens + s.sharedPromptTokens) / s.promptTokens) : 0,
      preemptions: s.preemptions,
      version: s.version,
    };
  }

  /** Tokens per second from the oldest sample in the window to now (an idle engine decays to 0). */
  private rate(): number {
    const now = this.now();
    const first = this.samples.find((x) => x.t >= now - WINDOW_MS);
    const newest = this.samples[this.samples.length - 1];
    if (!first || !newest || now - first.t <= 0) return 0;
    return (newest.tokens - first.tokens) / ((now - first.t) / 1000);
  }
}

/**
 * Puts an engine's figures in the actor's heartbeat and in Prometheus gauges (rollstream_engine_*), refreshed every
 * `everyMs`; returns the function that stops it.
 */
export function reportEngineFigures(
  ctx: Pick<ActorContext, "metrics"> & { health: Pick<Health, "engineFigures"> },
  figures: () => EngineFigures,
  everyMs = 1_000,
): () => void {
  const g = (name: string, help: string) => ctx.metrics.gauge(`engine_${name}`, help);
  const gauges: Record<keyof EngineFigures, { set(v: number): void }> = {
    running: g("running_sequences", "sequences the inference engine runs (a group's completions count one each)"),
    waiting: g("waiting_sequences", "sequences waiting for KV room, a sequence slot or new weights"),
    kvBlocksUsed: g("kv_blocks_used", "KV blocks held by sequences"),
    kvBlocksCached: g("kv_blocks_cached", "idle KV blocks kept for prefix-cache hits"),
    kvBlocksFree: g("kv_blocks_free", "free KV blocks"),
    decodeTokensPerSec: g("decode_tokens_per_second", "tokens sampled per second over the last 5 s"),
    prefixHitRate: g("prefix_cache_hit_rate", "share of admitted prompt tokens not prefilled (prefix cache or group sharing)"),
    preemptions: g("preemptions", "sequences preempted (recomputed later) for lack of KV blocks, since start"),
    version: g("weights_version", "weights version the engine samples under"),
  };
  const update = () => {
    const f = figures();
    for (const k of Object.keys(gauges) as Array<keyof EngineFigures>) gauges[k].set(f[k]);
  };
  ctx.health.engineFigures(figures);
  update();
  const timer = setInterval(update, everyMs);
  timer.unref();
  return () => {
    clearInterval(timer);
    ctx.health.engineFigures(null);
  };
}

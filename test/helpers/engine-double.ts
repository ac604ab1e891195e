// The engine behind the SGLang and vLLM test servers (sglang-test-server.ts, vllm-test-server.ts): it samples
// one token per step from a token source (a deterministic script, or our own tiny model loaded from the HF
// folder the fleet exported), labels every token with the weight version it has, and can be paused, updated,
// aborted, made to fail its updates or its health check, and killed, as the tests need.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromHfConfig } from "../../kernels/hf-config.js";
import { PolicyModel } from "../../kernels/index.js";

export interface Sampling {
  temperature: number;
  topP: number;
  topK: number;
}

export interface TokenSource {
  /** Loads the HF folder; throws when it is not a loadable model. */
  load(dir: string): void;
  next(prefix: number[], seed: number, s: Sampling): Promise<{ token: number; logprob: number }>;
}

/** Tokens from a fixed rule of the prefix and seed (letters a..z), with a logprob that says which version drew it. */
export function scriptedSource(opts: { stopAfter?: { token: number; steps: number } } = {}): TokenSource & { loaded: string[] } {
  const loaded: string[] = [];
  return {
    loaded,
    load(dir) {
      if (!existsSync(join(dir, "config.json")) || !existsSync(join(dir, "model.safetensors"))) throw new Error(`${dir} is not an HF model folder`);
      loaded.push(dir);
    },
    async next(prefix, seed) {
      const sum = prefix.reduce((a, b) => a + b, 0);
      const stop = opts.stopAfter;
      const token = stop && prefix.length >= stop.steps ? stop.token : 97 + ((sum * 31 + seed + prefix.length) % 26);
      return { token, logprob: -((token % 7) + 1) / 10 - loaded.length / 1000 };
    },
  };
}

/** Our own tiny model, loaded from each exported folder: the weights the learner trained, sampled on the CPU. */
export function modelSource(): TokenSource {
  let model: PolicyModel | null = null;
  return {
    load(dir) {
      const cfg = fromHfConfig(JSON.parse(readFileSync(join(dir, "config.json"), "utf8")));
      const next = PolicyModel.create(cfg, { seed: 1, threads: 1, device: "cpu" });
      next.loadSafetensors(new Uint8Array(readFileSync(join(dir, "model.safetensors"))));
      model?.dispose();
      model = next;
    },
    async next(prefix, seed, s) {
      if (!model) throw new Error("no weights loaded");
      const [r] = await model.generate({
        prompts: [Int32Array.from(prefix)],
        maxNewTokens: 1,
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        seeds: [seed],
      });
      return { token: r!.tokens[0]!, logprob: r!.logprobs[0]! };
    },
  };
}

export interface RunResult {
  tokens: number[];
  logprobs: number[];
  /** Output-token spans per version label, as SGLang's weight_versions.py and vLLM's WeightVersionSpan shape them. */
  spans: { version: string; start: number; end: number }[];
  finish: "stop" | "length" | "abort";
  matched?: number;
}

export class EngineDouble {
  /** The weight version label (SGLang's server_args.weight_version, vLLM's weight version). */
  label = "default";
  stepDelayMs = 0;
  failUpdates = false;
  unhealthy = false;
  /** What GET /metrics answers (Prometheus text); null: no such route (404). */
  metrics: string | null = null;
  /** While set, no step runs (a pause in keep mode, an update in progress). */
  private gate: Promise<void> | null = null;
  private openGate: (() => void) | null = null;
  private readonly inFlight = new Set<AbortController>();
  /** Every request body each route received, in order. */
  readonly received: { route: string; body: unknown }[] = [];
  /** Every weight load, in order: [label, folder]. */
  readonly loads: [string, string][] = [];
  /** LoRA adapters loaded now: name → folder (both servers' load_lora_adapter); every adapter load in order. */
  readonly adapters = new Map<string, string>();
  readonly adapterLoads: [string, string][] = [];
  /** The adapter each generate request named (null: none), in order. */
  readonly adapterOfRequests: (string | null)[] = [];

  /** Loads a PEFT folder under `name`; throws when it is not one (or the server is set to fail its updates). */
  async loadAdapter(name: string, dir: string): Promise<void> {
    if (this.loadDelayMs) await new Promise((r) => setTimeout(r, this.loadDelayMs));
    if (this.failUpdates) throw new Error("this server is set to fail its weight updates");
    if (!existsSync(join(dir, "adapter_config.json")) || !existsSync(join(dir, "adapter_model.safetensors")))
      throw new Error(`${dir} is not a PEFT adapter folder`);
    this.adapters.set(name, dir);
    this.adapterLoads.push([name, dir]);
  }

  constructor(readonly source: TokenSource) {}

  get busy(): number {
    return this.inFlight.size;
  }

  hold(): void {
    if (!this.gate) this.gate = new Promise<void>((r) => (this.openGate = r));
  }

  release(): void {
    this.openGate?.();
    this.gate = null;
    this.openGate = null;
  }

  /** Ends every request in flight with its partial output and finish reason abort. */
  abortAll(): number {
    const n = this.inFlight.size;
    for (const c of this.inFlight) c.abort();
    return n;
  }

  /** Resolves once nothing is in flight (a pause in wait mode, an update without abort). */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await new Promise((r) => setTimeout(r, 5));
  }

  /** How long a weight load takes. */
  loadDelayMs = 0;

  async load(dir: string, label: string | null): Promise<void> {
    if (this.loadDelayMs) await new Promise((r) => setTimeout(r, this.loadDelayMs));
    if (this.failUpdates) throw new Error("this server is set to fail its weight updates");
    this.source.load(dir);
    if (label !== null) this.label = label;
    this.loads.push([this.label, dir]);
  }

  async run(prompt: number[], maxTokens: number, stopTokenIds: number[], seed: number, s: Sampling): Promise<RunResult> {
    const ctl = new AbortController();
    this.inFlight.add(ctl);
    const out: RunResult = { tokens: [], logprobs: [], spans: [], finish: "length" };
    try {
      await this.gate; // a request that arrives during an update waits for it, as on both servers
      for (let step = 0; step < maxTokens; step++) {
        while (this.gate && !ctl.signal.aborted) await Promise.race([this.gate, aborted(ctl.signal)]);
        if (ctl.signal.aborted) return { ...out, finish: "abort" };
        const { token, logprob } = await this.source.next([...prompt, ...out.tokens], (seed + step) >>> 0, s);
        out.tokens.push(token);
        out.logprobs.push(logprob);
        const last = out.spans[out.spans.length - 1];
        if (last && last.version === this.label) last.end++;
        else out.spans.push({ version: this.label, start: out.tokens.length - 1, end: out.tokens.length });
        if (stopTokenIds.includes(token)) return { ...out, finish: "stop", matched: token };
        if (this.stepDelayMs) await new Promise((r) => setTimeout(r, this.stepDelayMs));
      }
      return out;
    } finally {
      this.inFlight.delete(ctl);
    }
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((r) => signal.addEventListener("abort", () => r(), { once: true }));
}

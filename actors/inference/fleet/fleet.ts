// A fleet of external inference servers as one inference backend.
// - Sticky by rollout: each rollout has its own client, and all its turns go to the server its first turn went
//   to (its prefix stays in that server's cache), unless that server leaves rotation.
// - The prefix cache is namespaced by run and policy version (cache_salt / extra_key).
// - At most maxInFlightPerServer requests per server; the rest wait here. With adaptiveCap, each server's cap follows
//   its own queue and KV figures from /metrics (server-load.ts): what it runs at once while it queues, more while
//   it has room and the fleet waits for it.
// - A server that fails (unreachable, 5xx, past its deadline, off-protocol) leaves rotation at once; its requests
//   in flight are aborted and resubmitted elsewhere with the tokens they already had, so nothing is lost. Every
//   healthCheckMs a server out of rotation is checked; once healthy it loads the current weights and rejoins.
// - Weight updates go to one server at a time, each with a deadline and retries; the others keep serving.
//   Nothing is sent to a server while it updates, and its update aborts (or drains) what it had in flight, so
//   every segment a server returns was sampled by one version, the one it had when the request went out.
//   A server that fails its update leaves rotation rather than serve stale weights.
// - LoRA adapter shipping (model.lora.ship adapter, `adapters` here): a version with adapters is the frozen base
//   (loaded once per server, as full weights, labelled lora-base-<sha12>; or not at all with fleet.loraBase served)
//   plus a PEFT folder loaded under its own name <run>-v<n> (load_lora_adapter), which every request the server gets
//   then names; the newest `adapters.keep` stay loaded (requests in flight may name them), older ones are unloaded. A server that leaves rotation is
//   assumed to have lost both (it may have restarted): it loads the base and the adapter again when it rejoins.
import type { Generation, ModelClient, SamplingArgs } from "../../../environments/api/model.js";
import type { TokenizerLike } from "../../../environments/api/tokenizer.js";
import type { LoraAdapterFiles, Task } from "../../../streams/index.js";
import type { FleetSchema } from "../../runtime/config.js";
import type { InferenceBackend } from "../backend.js";
import type { z } from "zod";
import { adapterName, type EngineServer, type Segment, type SegmentRequest } from "./engine-server.js";
import { GenerationBuilder, firstStop } from "./generation.js";
import { ServerDown } from "./http.js";
import { nextCap } from "./server-load.js";

type FleetSettings = z.output<typeof FleetSchema>;

interface Log {
  info(o: object, msg: string): void;
  warn(o: object, msg: string): void;
}
interface Metrics {
  counter(name: string, help: string): { inc(): void };
  gauge(name: string, help: string): { set(v: number): void };
}

export interface FleetOptions {
  servers: EngineServer[];
  tokenizer: TokenizerLike;
  /** The model's context window: a generation never asks for more tokens than fit. */
  contextTokens: number;
  run: string;
  settings: FleetSettings;
  exporter: {
    write(version: number, safetensors: Uint8Array): string;
    writeBase(sha256: string, safetensors: Uint8Array): string;
    writeAdapter(name: string, files: { config: string; weights: Uint8Array }): string;
    prune(current: number, adapterPrefix?: string): void;
  };
  /** Present with model.lora.ship adapter: each version's adapters (null: a version without, shipped whole) and their base. */
  adapters?: { adapter(version: number): Promise<LoraAdapterFiles | null>; base(sha256: string): Promise<Uint8Array>; keep: number };
  log: Log;
  metrics?: Metrics;
  signal: AbortSignal;
}

class Slot {
  state: "in" | "out" | "updating" = "out";
  /** The policy version this server serves (-1: none of ours yet). */
  version = -1;
  inFlight = 0;
  /** Requests it may have outstanding (adaptiveCap moves it within 1..maxInFlightPerServer). */
  cap: number;
  /** A request waited for this server's cap since its last load check. */
  heldBack = false;
  /** The LoRA base it has (sha256), the adapters loaded on it (oldest first), and the one requests name. */
  base: string | null = null;
  adapters: string[] = [];
  adapter: string | null = null;
  /** Aborted when the server leaves rotation, so the requests it holds are resubmitted elsewhere at once. */
  epoch = new AbortController();
  constructor(
    readonly server: EngineServer,
    maxInFlight: number,
  ) {
    this.cap = maxInFlight;
  }
}

/** All the turns of one rollout. */
class RolloutClient implements ModelClient {
  slot: Slot | null = null;
  calls = 0;
  constructor(
    private readonly fleet: Fleet,
    readonly tokenizer: TokenizerLike,
    readonly key: string,
    private readonly seedBase: number,
  ) {}
  generate(promptIds: number[], args: SamplingArgs, signal?: AbortSignal): Promise<Generation> {
    const seed = (this.seedBase + this.calls * 7919) >>> 0;
    return this.fleet.generate(this, promptIds, args, seed, signal ?? new AbortController().signal);
  }
}

/** How a server is brought to one version: its full weights, or a LoRA base plus the version's adapter. */
type Plan = { kind: "full"; dir: string } | { kind: "adapter"; name: string; dir: string; baseSha: string; baseDir: string };

export class Fleet implements InferenceBackend {
  version = -1;
  generatedTokens = 0;
  private readonly slots: Slot[];
  /** Weight operations (updates, rejoins) run one at a time, in order. */
  private ops: Promise<unknown> = Promise.resolve();
  private waiters = new Set<() => void>();
  private turn = 0;
  private readonly plans = new Map<number, Plan>();
  private readonly baseDirs = new Map<string, string>();

  constructor(private readonly o: FleetOptions) {
    if (o.servers.length === 0) throw new Error("a fleet needs at least one server");
    this.slots = o.servers.map((s) => new Slot(s, o.settings.maxInFlightPerServer));
  }

  /** Exports `version`, brings every healthy server to it, and starts the health loop for the others. */
  async start(version: number, safetensors: Uint8Array): Promise<void> {
    await this.prepare(version, safetensors);
    this.version = version;
    for (const slot of this.slots) await this.serial(() => this.rejoin(slot));
    const up = this.slots.filter((s) => s.state === "in").length;
    this.o.log.info({ version, inRotation: up, servers: this.slots.length }, "fleet started");
    void this.healthLoop();
    if (this.o.settings.adaptiveCap) void this.loadLoop();
  }

  swapWeights(version: number, safetensors: Uint8Array, _rollback: boolean): Promise<void> {
    return this.serial(async () => {
      const plan = await this.prepare(version, safetensors);
      for (const slot of this.slots) if (slot.state !== "out" && slot.version !== version) await this.update(slot, version, plan);
      // Servers out of rotation take this version when they rejoin.
      this.version = version;
      this.o.exporter.prune(version, this.o.adapters ? adapterName(this.o.run, 0).slice(0, -1) : undefined);
      for (const v of this.plans.keys()) if (v !== version && !this.slots.some((s) => s.version === v)) this.plans.delete(v);
    });
  }

  /** Exports `version` for the servers: its adapters (and their base) when it has them and they are shipped, else its weights. */
  private async prepare(version: number, safetensors: Uint8Array): Promise<Plan> {
    const a = this.o.adapters ? await this.o.adapters.adapter(version) : null;
    let plan: Plan;
    if (a && this.o.adapters) {
      const sha = a.baseSha256;
      // Fetched and exported once per base (a learner restarted on the same base publishes the same bytes).
      const baseDir = this.baseDirs.get(sha) ?? this.o.exporter.writeBase(sha, await this.o.adapters.base(sha));
      this.baseDirs.set(sha, baseDir);
      const name = adapterName(this.o.run, version);
      plan = { kind: "adapter", name, dir: this.o.exporter.writeAdapter(name, a), baseSha: a.baseSha256, baseDir };
    } else plan = { kind: "full", dir: this.o.exporter.write(version, safetensors) };
    this.plans.set(version, plan);
    return plan;
  }

  rolloutClients(task: Task): ModelClient[] {
    return Array.from({ length: task.groupSize }, (_, i) => new RolloutClient(this, this.o.tokenizer, `${task.taskId}.${i}`, task.seed + i * 104_729));
  }

  /** Servers in rotation and the version each serves (tests, doctor). */
  describe(): { url: string; state: string; version: number; inFlight: number; cap: number }[] {
    return this.slots.map((s) => ({ url: s.server.url, state: s.state, version: s.version, inFlight: s.inFlight, cap: s.cap }));
  }

  /** One generation: segments until it stops, reaches its budget, or (after an abort) is resubmitted to the end. */
  async generate(rc: RolloutClient, promptIds: number[], args: SamplingArgs, seed: number, signal: AbortSignal): Promise<Generation> {
    rc.calls++;
    const budget = Math.min(args.maxTokens, this.o.contextTokens - promptIds.length);
    const stopTokenIds = this.o.tokenizer.stopTokenIds();
    const stopSequences = (args.stop ?? []).map((s) => this.o.tokenizer.encode(s));
    const b = new GenerationBuilder();
    let serverStopped = false;
    let idle = 0;
    while (budget > 0 && b.tokenIds.length < budget && !serverStopped) {
      const { temperature, topP, topK } = args;
      const req = { tokenIds: [...promptIds, ...b.tokenIds], maxTokens: budget - b.tokenIds.length, temperature, topP, topK, seed, stopTokenIds };
      const r = await this.segment(rc, req, signal);
      const progressed = r !== null && r.seg.tokenIds.length > 0;
      idle = progressed ? 0 : idle + 1;
      if (idle > 2 * this.slots.length + 2) throw new Error(`generation for ${rc.key} made no progress on any server (${idle} tries)`);
      if (!r) continue;
      b.append(r.seg, r.version);
      this.generatedTokens += r.seg.tokenIds.length;
      if (r.seg.finish === "stop") serverStopped = true;
      else if (r.seg.finish === "length" || firstStop(b.tokenIds, stopTokenIds, stopSequences)) break;
    }
    return b.finish({
      maxTokens: args.maxTokens,
      budget,
      serverStopped,
      stopTokenIds,
      stopSequences,
      tokenizer: this.o.tokenizer,
      versionIfEmpty: this.version,
    });
  }

  /** One request on the rollout's server; null when that server failed (it is out of rotation now: try again). */
  private async segment(
    rc: RolloutClient,
    req: Omit<SegmentRequest, "requestId" | "cacheKey">,
    signal: AbortSignal,
  ): Promise<{ seg: Segment; version: number } | null> {
    const slot = await this.acquire(rc, signal);
    const version = slot.version;
    const adapter = slot.adapter;
    const epoch = slot.epoch.signal;
    try {
      const full = {
        ...req,
        requestId: `${this.o.run}.${rc.key}.${rc.calls}.${++this.turn}`,
        cacheKey: `${this.o.run}:v${version}`,
        ...(adapter ? { adapter } : {}),
      };
      const seg = await slot.server.generate(full, { deadlineMs: this.o.settings.requestDeadlineMs, signal: AbortSignal.any([signal, epoch]) });
      return { seg, version };
    } catch (e) {
      if (signal.aborted) throw e;
      if (e instanceof ServerDown) {
        this.takeOut(slot, e.message);
        return null;
      }
      if (epoch.aborted) return null;
      throw e;
    } finally {
      slot.inFlight--;
      this.wake();
    }
  }

  /** The rollout's server once it can take a request (in rotation, under its cap); another when it left rotation. */
  private async acquire(rc: RolloutClient, signal: AbortSignal): Promise<Slot> {
    const deadline = Date.now() + this.o.settings.requestDeadlineMs;
    for (;;) {
      if (signal.aborted) throw signal.reason ?? new Error("generation aborted");
      const slot = this.pick(rc);
      if (slot) {
        slot.inFlight++;
        return slot;
      }
      // An update can take longer than a request (its own deadline bounds it): wait it out.
      if (Date.now() > deadline && !this.slots.some((s) => s.state === "updating")) {
        const states = this.slots.map((s) => `${s.server.url} ${s.state}`).join(", ");
        throw new Error(`no inference server could take a request for ${this.o.settings.requestDeadlineMs} ms (${states})`);
      }
      await this.changed(signal, 1_000);
    }
  }

  private pick(rc: RolloutClient): Slot | null {
    const sticky = rc.slot;
    // Its own server while it can take the request, or while it is full: the rollout's prefix is cached there.
    if (sticky?.state === "in") {
      if (sticky.inFlight < sticky.cap) return sticky;
      sticky.heldBack = true;
      return null;
    }
    const inRotation = this.slots.filter((s) => s.state === "in");
    let ready = inRotation.filter((s) => s.inFlight < s.cap);
    if (ready.length === 0) for (const s of inRotation) s.heldBack = true;
    // While its server updates, a server already on newer weights loses nothing (the version-salted cache is
    // cold after the update anyway); one on older weights would only add staleness: wait for the update then.
    if (sticky?.state === "updating") ready = ready.filter((s) => s.version > sticky.version);
    if (ready.length === 0) return null;
    // Newest weights first (during an update some servers have them already), then the least busy.
    const newest = Math.max(...ready.map((s) => s.version));
    const candidates = ready.filter((s) => s.version === newest);
    const least = Math.min(...candidates.map((s) => s.inFlight));
    const tied = candidates.filter((s) => s.inFlight === least);
    rc.slot = tied[this.turn++ % tied.length]!;
    return rc.slot;
  }

  /** Loads `version` on one server, retried; it leaves rotation when every try failed. */
  private async update(slot: Slot, version: number, plan: Plan): Promise<void> {
    const { updateRetries } = this.o.settings;
    slot.state = "updating";
    this.wake();
    for (let attempt = 0; attempt <= updateRetries; attempt++) {
      const started = Date.now();
      try {
        await this.bring(slot, version, plan);
        slot.version = version;
        slot.state = "in";
        this.count("fleet_weight_updates_total", "weight updates an inference server completed");
        this.o.log.info({ server: slot.server.url, version, ms: Date.now() - started }, "server updated");
        this.wake();
        this.gaugeInRotation();
        return;
      } catch (e) {
        this.o.log.warn({ server: slot.server.url, version, attempt, err: (e as Error).message }, "weight update failed");
        if (attempt < updateRetries) await sleep(Math.min(10_000, 500 * 2 ** attempt), this.o.signal);
      }
    }
    this.takeOut(slot, `weight update to v${version} failed ${updateRetries + 1} times`);
  }

  /** One try at bringing a server to `version`: its full weights, or (LoRA) its base when it lacks it, then the adapter. */
  private async bring(slot: Slot, version: number, plan: Plan): Promise<void> {
    const opts = { deadlineMs: this.o.settings.updateDeadlineMs };
    const server = slot.server;
    if (plan.kind === "full") {
      await server.loadWeights(plan.dir, version, opts);
      [slot.base, slot.adapters, slot.adapter] = [null, [], null];
      return;
    }
    if (!server.loadAdapter || !server.unloadAdapter) throw new Error(`${server.url}: this backend cannot load LoRA adapters (model.lora.ship adapter)`);
    if (slot.base !== plan.baseSha) {
      // fleet.loraBase served: the server was started on the base (model.path); nothing to load.
      if (this.o.settings.loraBase === "load") await server.loadWeights(plan.baseDir, `lora-base-${plan.baseSha.slice(0, 12)}`, opts);
      [slot.base, slot.adapters, slot.adapter] = [plan.baseSha, [], null];
    }
    if (!slot.adapters.includes(plan.name)) {
      await server.loadAdapter(plan.name, plan.dir, opts);
      slot.adapters.push(plan.name);
    }
    slot.adapter = plan.name;
    while (slot.adapters.length > (this.o.adapters?.keep ?? 1)) {
      const old = slot.adapters.shift()!;
      await server
        .unloadAdapter(old, opts)
        .catch((e: unknown) => this.o.log.warn({ server: server.url, adapter: old, err: (e as Error).message }, "unload failed"));
    }
  }

  /** An out-of-rotation server that answers its health check loads the current version and rejoins. */
  private async rejoin(slot: Slot): Promise<void> {
    if (slot.state !== "out" || this.o.signal.aborted) return;
    // Short: a hung server's health check holds up the weight updates queued behind it.
    if (!(await slot.server.healthy({ deadlineMs: Math.min(10_000, this.o.settings.updateDeadlineMs) }))) return;
    const plan = this.plans.get(this.version);
    if (plan) await this.update(slot, this.version, plan);
  }

  private async healthLoop(): Promise<void> {
    while (!this.o.signal.aborted) {
      await sleep(this.o.settings.healthCheckMs, this.o.signal);
      for (const slot of this.slots) if (slot.state === "out") await this.serial(() => this.rejoin(slot));
    }
  }

  /** adaptiveCap: every loadCheckMs each server in rotation's cap follows its /metrics (server-load.ts). */
  private async loadLoop(): Promise<void> {
    const { loadCheckMs, maxInFlightPerServer } = this.o.settings;
    while (!this.o.signal.aborted) {
      await sleep(loadCheckMs, this.o.signal);
      for (const slot of this.slots) {
        if (slot.state !== "in" || !slot.server.load) continue;
        const load = await slot.server.load({ deadlineMs: Math.max(1_000, loadCheckMs) });
        const heldBack = slot.heldBack;
        slot.heldBack = false;
        if (!load) continue;
        const cap = nextCap(slot.cap, load, maxInFlightPerServer, heldBack);
        if (cap === slot.cap) continue;
        this.o.log.info({ server: slot.server.url, from: slot.cap, to: cap, ...load }, "server in-flight cap");
        slot.cap = cap;
        this.wake();
      }
    }
  }

  private takeOut(slot: Slot, why: string): void {
    if (slot.state === "out") return;
    slot.state = "out";
    // It may come back as a fresh process: nothing of ours is assumed loaded on it.
    [slot.base, slot.adapters, slot.adapter] = [null, [], null];
    slot.epoch.abort(new ServerDown(slot.server.url, why));
    slot.epoch = new AbortController();
    this.count("fleet_server_failures_total", "times an inference server left rotation");
    this.o.log.warn({ server: slot.server.url, why, inRotation: this.slots.filter((s) => s.state === "in").length }, "server out of rotation");
    this.gaugeInRotation();
    this.wake();
  }

  private serial<T>(op: () => Promise<T>): Promise<T> {
    const next = this.ops.then(op, op);
    this.ops = next.catch(() => undefined);
    return next;
  }

  private wake(): void {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  private changed(signal: AbortSignal, ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.waiters.add(done);
    });
  }

  private count(name: string, help: string): void {
    this.o.metrics?.counter(name, help).inc();
  }

  private gaugeInRotation(): void {
    this.o.metrics?.gauge("fleet_servers_in_rotation", "inference servers in rotation").set(this.slots.filter((s) => s.state === "in").length);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

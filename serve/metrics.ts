// GET /metrics in Prometheus text (prom-client): requests and tokens by route, the scheduler's figures (running and
// waiting sequences, KV blocks), the weights in use and the time each load took. Names follow vLLM's where one
// exists (num_requests_running, num_requests_waiting), under the rollstream_serve_ prefix.
import type { FastifyInstance } from "fastify";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { PolicyTokenEngine } from "./policy-token-engine.js";

export function registerMetrics(app: FastifyInstance, engine: PolicyTokenEngine): void {
  const registry = new Registry();
  const requests = new Counter({
    name: "rollstream_serve_requests_total",
    help: "requests answered, by route and status",
    labelNames: ["route", "status"],
    registers: [registry],
  });
  const tokens = new Counter({ name: "rollstream_serve_generated_tokens_total", help: "tokens sampled", registers: [registry] });
  engineGauges(registry, engine);
  const loadSeconds = new Histogram({
    name: "rollstream_serve_weight_load_seconds",
    help: "time from a load request to the weights in use",
    registers: [registry],
  });
  let seen = engine.updates.length;
  let tokensSeen = 0;
  app.addHook("onResponse", async (req, reply) => {
    const route = req.routeOptions.url ?? "unknown";
    if (route !== "/metrics") requests.inc({ route, status: String(reply.statusCode) });
  });
  app.get("/metrics", async (_req, reply) => {
    for (; seen < engine.updates.length; seen++) loadSeconds.observe(engine.updates[seen]!.ms / 1000);
    const generated = engine.engine.generatedTokens;
    tokens.inc(generated - tokensSeen);
    tokensSeen = generated;
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}

/** Figures read when Prometheus scrapes: the scheduler's, the pause, the loads. */
function engineGauges(registry: Registry, engine: PolicyTokenEngine): void {
  const figures = () => engine.engine.figures();
  new Gauge({
    name: "rollstream_serve_num_requests_running",
    help: "sequences in the running batch",
    registers: [registry],
    collect() {
      this.set(figures().running);
    },
  });
  new Gauge({
    name: "rollstream_serve_num_requests_waiting",
    help: "sequences waiting for a slot or KV blocks",
    registers: [registry],
    collect() {
      this.set(figures().waiting);
    },
  });
  new Gauge({
    name: "rollstream_serve_kv_cache_usage_perc",
    help: "share of the KV pool held by sequences, 0..1 (blocks kept only for prefix hits count as free, as vLLM counts them)",
    registers: [registry],
    collect() {
      const f = figures();
      const total = f.kvBlocksUsed + f.kvBlocksCached + f.kvBlocksFree;
      this.set(total > 0 ? f.kvBlocksUsed / total : 0);
    },
  });
  new Gauge({
    name: "rollstream_serve_paused",
    help: "1 while paused",
    registers: [registry],
    collect() {
      this.set(engine.paused ? 1 : 0);
    },
  });
  new Gauge({
    name: "rollstream_serve_weight_loads",
    help: "weight loads since start (the startup load counts)",
    registers: [registry],
    collect() {
      this.set(engine.updates.length);
    },
  });
}

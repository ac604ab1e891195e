// `rollstream dashboard`: a read-only web page over one run, served by fastify. Everything it shows comes
// from the run's streams and KV (run-data.ts); the page is plain HTML + JS from cli/dashboard/static and the
// charts are uPlot from node_modules, so it works offline. Live runs update through server-sent events: one
// poll of the overview for every open page (and while none is open, so the dashboard keeps the run's record
// up to its end). Every route answers within a few seconds, also once the run's server is gone (run-data.ts).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Fastify, { type FastifyInstance, type FastifyReply } from "fastify";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Tokenizer } from "../../kernels/tokenizer.js";
import { RunData, ServerGoneError, type Overview } from "./run-data.js";
import { groupFilter, payloadPreview } from "./filters.js";
import { groupView } from "./views.js";
import { openWire, RunChannels, type ReplayRecord } from "../../streams/index.js";
import type { RunConfig } from "../../actors/runtime/config.js";
import { LearnerLogprobCalculator } from "./learner-logprobs.js";
import { createTokenizer } from "../../actors/runtime/model-factory.js";

export interface DashboardOptions {
  nc: NatsConnection;
  run: string;
  host?: string;
  port?: number;
  /** Decodes token ids for the token view when the run's config is known. */
  tokenizer?: Tokenizer;
  /** The run's config: with it the token view also shows the learner's logprobs (recomputed on demand). */
  config?: RunConfig;
  /** Server-sent overview updates this often. */
  pushMs?: number;
}

export interface Dashboard {
  url: string;
  close(): Promise<void>;
}

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "cli", "dashboard", "static"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("dashboard: cannot find cli/dashboard/static above the compiled code");
    dir = up;
  }
}

const STATIC: Record<string, [string, string]> = {
  "/": ["cli/dashboard/static/index.html", "text/html; charset=utf-8"],
  "/app.js": ["cli/dashboard/static/app.js", "text/javascript; charset=utf-8"],
  "/app.css": ["cli/dashboard/static/app.css", "text/css; charset=utf-8"],
  "/vendor/uplot.js": ["node_modules/uplot/dist/uPlot.iife.min.js", "text/javascript; charset=utf-8"],
  "/vendor/uplot.css": ["node_modules/uplot/dist/uPlot.min.css", "text/css; charset=utf-8"],
};

const int = (v: unknown, d: number) => (typeof v === "string" && /^\d+$/.test(v) ? Number(v) : d);

/** Answers a payload route's failure: 503 when the server is gone (the page says so), else 404. */
function notFound(reply: FastifyReply, e: unknown): FastifyReply {
  return reply.code(e instanceof ServerGoneError ? 503 : 404).send({ error: (e as Error).message.split("\n")[0] });
}

/** Newest first (what a user of a live run wants to see), `limit` (at most 200) from `offset`. */
function page<T>(list: readonly T[], q: Record<string, string>, key: string): Record<string, unknown> {
  const offset = int(q["offset"], 0);
  const limit = Math.min(200, int(q["limit"], 50));
  return { total: list.length, offset, [key]: list.slice(Math.max(0, list.length - offset - limit), Math.max(0, list.length - offset)).reverse() };
}

export async function startDashboard(o: DashboardOptions): Promise<Dashboard> {
  const root = packageRoot();
  const data = new RunData(o.nc, o.run);
  const tokenizer = o.tokenizer ?? (o.config ? createTokenizer(o.config) : undefined);
  const learner = o.config ? new LearnerLogprobCalculator(o.config, new RunChannels(openWire(o.nc, o.run)).weights) : null;
  // Open event streams must not hold close() up: a browser tab left open would keep `train` from exiting.
  const app: FastifyInstance = Fastify({ logger: false, forceCloseConnections: true });
  for (const [path, [file, type]] of Object.entries(STATIC)) {
    const body = readFileSync(join(root, file));
    app.get(path, async (_req, reply) => reply.type(type).send(body));
  }
  app.get("/api/overview", async () => data.overview());
  app.get<{ Params: { actor: string } }>("/api/metrics/:actor", async (req, reply) => {
    if (!/^[a-z]+$/.test(req.params.actor)) return reply.code(400).send({ error: "actor names are lower-case letters" });
    return data.metrics(req.params.actor);
  });
  app.get("/api/evals", async () => data.evals());
  app.get<{ Querystring: Record<string, string> }>("/api/groups", async (req, reply) => {
    await data.refresh();
    const filter = groupFilter(req.query);
    if (typeof filter === "string") return reply.code(400).send({ error: filter });
    return page(data.groups.filter(filter), req.query, "groups");
  });
  app.get<{ Params: { seq: string } }>("/api/groups/:seq", async (req, reply) => {
    const seq = int(req.params.seq, -1);
    if (seq < 1) return reply.code(400).send({ error: "a group is named by its stream sequence" });
    try {
      return groupView(seq, await data.group(seq), tokenizer);
    } catch (e) {
      return notFound(reply, e);
    }
  });
  app.get<{ Params: { seq: string }; Querystring: Record<string, string> }>("/api/groups/:seq/learner", async (req, reply) => {
    const seq = int(req.params.seq, -1);
    const row = int(req.query["row"], -1);
    if (seq < 1 || row < 0) return reply.code(400).send({ error: "name the group by its sequence and the completion by ?row=<index>" });
    if (!learner) return reply.code(409).send({ error: "the learner's logprobs need the run's config: start the dashboard with --config" });
    try {
      const r = (await data.group(seq))[row];
      if (!r) return reply.code(404).send({ error: `group ${seq} has no row ${row}` });
      return await learner.compute(int(req.query["version"], r.step), r.promptIds, r.completionIds);
    } catch (e) {
      return notFound(reply, e);
    }
  });
  app.get<{ Querystring: Record<string, string> }>("/api/eval/samples", async (req) => {
    const q = req.query;
    let list = (await data.evalIndex()).filter((e) => e.kind === "sample");
    if (q["version"]) list = list.filter((e) => e.version === Number(q["version"]));
    if (q["env"]) list = list.filter((e) => e.env === q["env"]);
    if (q["split"]) list = list.filter((e) => e.split === q["split"]);
    if (q["greedy"]) list = list.filter((e) => e.kind === "sample" && e.greedy === (q["greedy"] === "1"));
    return page(list, q, "samples");
  });
  app.get("/api/eval/results", async () => (await data.evalIndex()).filter((e) => e.kind === "result"));
  app.get<{ Params: { seq: string } }>("/api/eval/samples/:seq", async (req, reply) => {
    const seq = int(req.params.seq, -1);
    if (seq < 1) return reply.code(400).send({ error: "an eval sample is named by its stream sequence" });
    try {
      return await data.evalSample(seq);
    } catch (e) {
      return notFound(reply, e);
    }
  });
  app.get<{ Querystring: Record<string, string> }>("/api/deadletters", async (req) => {
    await data.refresh();
    return page(data.deadLetters, req.query, "items");
  });
  app.get<{ Params: { seq: string } }>("/api/deadletters/:seq", async (req, reply) => {
    const seq = int(req.params.seq, -1);
    if (seq < 1) return reply.code(400).send({ error: "a dead letter is named by its stream sequence" });
    try {
      return payloadPreview(await data.deadLetterPayload(seq));
    } catch (e) {
      return notFound(reply, e);
    }
  });
  app.get("/api/checkpoints", async () => data.checkpoints());
  app.get("/api/health", async () => data.health());
  app.get("/api/queues", async () => data.queues());
  app.get("/api/steps", async () => data.steps());
  app.get("/api/replays", async () => {
    const sessions = new Map<string, { session: string; setting: string; steps: ReplayRecord[] }>();
    for (const r of await data.replays()) {
      const s = sessions.get(r.session) ?? { session: r.session, setting: r.setting, steps: [] };
      s.steps.push(r);
      sessions.set(r.session, s);
    }
    return [...sessions.values()].reverse();
  });
  // One poll for every open page; each new page gets the newest overview at once.
  const pages = new Set<FastifyReply>();
  let latest: Overview | null = null;
  let polling: Promise<void> | null = null;
  const send = (reply: FastifyReply, ov: Overview) => reply.raw.write(`event: overview\ndata: ${JSON.stringify(ov)}\n\n`);
  const poll = () => {
    polling ??= data
      .overview()
      .then((ov) => {
        latest = ov;
        for (const p of pages) send(p, ov);
      })
      .catch(() => undefined)
      .finally(() => {
        polling = null;
      });
    return polling;
  };
  app.get("/events", (req, reply) => {
    reply.raw.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    pages.add(reply);
    if (latest) send(reply, latest);
    void poll();
    const stop = () => pages.delete(reply);
    req.raw.on("close", stop);
    reply.raw.on("close", stop);
  });
  const timer = setInterval(() => void poll(), o.pushMs ?? 2000);
  timer.unref();
  const stopAll = async () => {
    clearInterval(timer);
    pages.clear();
    await app.close();
    await data.close();
    learner?.dispose();
  };
  const host = o.host ?? "127.0.0.1";
  const port = o.port ?? 0;
  let address: string;
  try {
    address = await app.listen({ host, port });
  } catch (e) {
    await stopAll();
    if ((e as NodeJS.ErrnoException).code === "EADDRINUSE") throw new PortInUseError(host, port);
    throw e;
  }
  return { url: address, close: stopAll };
}

/** The dashboard's port is taken (`train` then tries any free one; `rollstream dashboard` says so and exits). */
export class PortInUseError extends Error {
  override readonly name = "PortInUseError";
  constructor(
    readonly host: string,
    readonly port: number,
  ) {
    super(`port ${port} on ${host} is in use (another dashboard?): pick another with --port, or --port 0 for any free one`);
  }
}

// `rollstream dashboard`: a read-only web page over one run, served by fastify. Everything it shows comes
// from the run's streams and KV (run-data.ts); the page is plain HTML + JS from cli/dashboard/static and the
// charts are uPlot from node_modules, so it works offline. Live runs update through server-sent events.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Fastify, { type FastifyInstance } from "fastify";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Tokenizer } from "../../kernels/tokenizer.js";
import { RunData } from "./run-data.js";
import { groupView } from "./views.js";

export interface DashboardOptions {
  nc: NatsConnection;
  run: string;
  host?: string;
  port?: number;
  /** Decodes token ids for the token view when the run's config is known. */
  tokenizer?: Tokenizer;
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

export async function startDashboard(o: DashboardOptions): Promise<Dashboard> {
  const root = packageRoot();
  const data = new RunData(o.nc, o.run);
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
  app.get<{ Querystring: Record<string, string> }>("/api/groups", async (req) => {
    await data.refresh();
    const q = req.query;
    let list = data.groups;
    if (q["env"]) list = list.filter((g) => g.env === q["env"]);
    if (q["step"]) list = list.filter((g) => g.step === Number(q["step"]));
    const offset = int(q["offset"], 0);
    const limit = Math.min(200, int(q["limit"], 50));
    // Newest first: what a user of a live run wants to see.
    const page = list.slice(Math.max(0, list.length - offset - limit), list.length - offset).reverse();
    return { total: list.length, offset, groups: page };
  });
  app.get<{ Params: { seq: string } }>("/api/groups/:seq", async (req, reply) => {
    const seq = int(req.params.seq, -1);
    if (seq < 1) return reply.code(400).send({ error: "a group is named by its stream sequence" });
    try {
      return groupView(seq, await data.group(seq), o.tokenizer);
    } catch (e) {
      return reply.code(404).send({ error: (e as Error).message });
    }
  });
  app.get<{ Querystring: Record<string, string> }>("/api/deadletters", async (req) => {
    await data.refresh();
    const offset = int(req.query["offset"], 0);
    const limit = Math.min(200, int(req.query["limit"], 50));
    const list = data.deadLetters;
    return { total: list.length, offset, items: list.slice(Math.max(0, list.length - offset - limit), list.length - offset).reverse() };
  });
  app.get("/events", (req, reply) => {
    reply.raw.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    const push = async () => {
      const ov = await data.overview().catch((e: Error) => ({ error: e.message }));
      reply.raw.write(`event: overview\ndata: ${JSON.stringify(ov)}\n\n`);
    };
    void push();
    const timer = setInterval(() => void push(), o.pushMs ?? 2000);
    timer.unref();
    timers.add(timer);
    const stop = () => {
      clearInterval(timer);
      timers.delete(timer);
    };
    req.raw.on("close", stop);
    reply.raw.on("close", stop);
  });
  const timers = new Set<NodeJS.Timeout>();
  const address = await app.listen({ host: o.host ?? "127.0.0.1", port: o.port ?? 0 });
  return {
    url: address,
    async close() {
      for (const t of timers) clearInterval(t);
      timers.clear();
      await app.close();
      await data.close();
    },
  };
}

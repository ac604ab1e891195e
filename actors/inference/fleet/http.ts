// JSON over HTTP to an inference server, every call with a deadline. Errors say whose fault they are: a
// ServerDown (unreachable, 5xx, past its deadline, an answer that is not the protocol) takes the server out of
// rotation and the request is retried elsewhere; a RequestRejected (4xx) is this request's own problem and
// would fail on any server, so it is not retried.
// node:http with keep-alive agents, not fetch: Node 20's fetch (undici) costs ~4x the client CPU per request
// (measured: 3.5-4.9 ms vs 0.6-0.9 ms a small POST on a loaded 2-core machine), which is most of a rollout's
// cost over HTTP on a small model. A request that fails on a kept-alive socket the server had just closed is sent
// once more on a fresh one (the documented race of keep-alive), so it is not taken for a dead server.
import http from "node:http";
import https from "node:https";
import type { z } from "zod";

export class ServerDown extends Error {
  constructor(
    readonly url: string,
    why: string,
  ) {
    super(`${url}: ${why}`);
    this.name = "ServerDown";
  }
}

export class RequestRejected extends Error {
  constructor(
    readonly url: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(`${url} rejected the request (${status}): ${body.slice(0, 300)}`);
    this.name = "RequestRejected";
  }
}

export interface CallOptions {
  deadlineMs: number;
  signal?: AbortSignal;
}

/** POST `body` as JSON (GET when body is undefined) and parse the answer with `schema`. */
export async function callJson<T extends z.ZodType>(
  url: string,
  body: unknown,
  schema: T,
  opts: CallOptions & { method?: "GET" | "POST" },
): Promise<z.output<T>> {
  const text = await call(url, body, opts);
  let json: unknown;
  try {
    json = text === "" ? {} : JSON.parse(text);
  } catch {
    throw new ServerDown(url, `answered with invalid JSON: ${text.slice(0, 200)}`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ServerDown(url, `answer does not follow the protocol at ${issue?.path.join(".") || "(root)"}: ${issue?.message}`);
  }
  return parsed.data;
}

const agents = {
  "http:": new http.Agent({ keepAlive: true, maxSockets: 1024 }),
  "https:": new https.Agent({ keepAlive: true, maxSockets: 1024 }),
};

/** The answer's text; throws ServerDown or RequestRejected as above. */
export async function call(url: string, body: unknown, opts: CallOptions & { method?: "GET" | "POST" }): Promise<string> {
  const deadline = AbortSignal.timeout(opts.deadlineMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
  const method = opts.method ?? (body === undefined ? "GET" : "POST");
  const payload = body === undefined ? undefined : JSON.stringify(body);
  let res: { status: number; text: string };
  try {
    res = await request(url, method, payload, signal).catch((e: Error & { reused?: boolean }) => {
      if (!e.reused || signal.aborted) throw e;
      return request(url, method, payload, signal);
    });
  } catch (e) {
    // The caller's own abort is not the server's fault: let it through as it is.
    if (opts.signal?.aborted) throw opts.signal.reason ?? e;
    if (deadline.aborted) throw new ServerDown(url, `no answer within ${opts.deadlineMs} ms`);
    const err = e as { code?: string; message?: string; cause?: { code?: string; message?: string } };
    throw new ServerDown(url, `unreachable (${err.code ?? err.cause?.code ?? err.message})`);
  }
  if (res.status >= 500) throw new ServerDown(url, `answered ${res.status}: ${res.text.slice(0, 300)}`);
  if (res.status >= 400) throw new RequestRejected(url, res.status, res.text);
  return res.text;
}

/** One request; its error carries `reused` when it failed on a kept-alive socket before any answer. */
function request(url: string, method: string, payload: string | undefined, signal: AbortSignal): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const agent = agents[u.protocol as keyof typeof agents];
    if (!agent) return reject(new Error(`unsupported protocol ${u.protocol}`));
    const headers: Record<string, string | number> =
      payload === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) };
    const mod = u.protocol === "https:" ? https : http;
    const req = mod.request(u, { method, agent, headers, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", (e: Error & { reused?: boolean; code?: string }) => {
      if (req.reusedSocket && e.code === "ECONNRESET") e.reused = true;
      reject(e);
    });
    req.end(payload);
  });
}

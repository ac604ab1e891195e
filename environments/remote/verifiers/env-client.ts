// A DEALER onto a verifiers v1 env-server (ROUTER), after verifiers/v1/serve/client.py@a60a606: each request is
// three frames [request_id, method, msgpack(payload)], each reply two [request_id, msgpack(response)], matched to
// its caller by request_id. Unlike upstream (rollouts untimed), every call here has a deadline: a run past it
// is cancelled on the server (`cancel {request_id}`, fire-and-forget like upstream's) and fails with
// TimeLimitError; an aborted signal cancels the same way. A lost server is noticed by the socket's disconnect
// event: its pending runs fail at once with ServerLostError (a ROUTER drops replies to a peer that went away,
// so they would never come) and the caller may run them again once health answers (the DEALER reconnects by
// itself to a server restarted at the same address).
import { randomUUID } from "node:crypto";
import { decode, encode } from "@msgpack/msgpack";
import { Dealer } from "zeromq";
import type { z } from "zod";
import { abortError, TimeLimitError } from "../../util/time-limit.js";
import { baseResponseSchema, cancelResponseSchema, runResponseSchema, type Episode, type RunRequest } from "./wire.js";

/** The server went away with the request in flight: run it again once the server answers health. */
export class ServerLostError extends Error {
  constructor(address: string, what: string) {
    super(`env server ${address} went away during ${what}`);
    this.name = "ServerLostError";
  }
}

/** The server answered success: false (or a reply that is not the protocol's). */
export class EnvServerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EnvServerError";
  }
}

interface Pending {
  method: string;
  resolve(data: Uint8Array): void;
  reject(err: Error): void;
}

export class EnvServerClient {
  // linger: cancels sent at shutdown get half a second to leave before the socket closes.
  private readonly socket = new Dealer({ linger: 500, sendHighWaterMark: 0, receiveHighWaterMark: 0, reconnectInterval: 100 });
  private readonly pending = new Map<string, Pending>();
  private receiving = false;
  private sendChain: Promise<void> = Promise.resolve();
  private closed = false;
  /** Runs sent and not yet answered (the heartbeat shows it). */
  get inFlight(): number {
    return this.pending.size;
  }

  constructor(readonly address: string) {
    this.socket.connect(address);
    this.socket.events.on("disconnect", () => this.failAll((m) => new ServerLostError(address, m)));
  }

  /** True when the server answers health within `timeoutMs`; never throws. */
  async health(timeoutMs = 2_000): Promise<boolean> {
    try {
      const reply = await this.request("health", {}, timeoutMs);
      return parse(baseResponseSchema, reply, "health").success;
    } catch {
      return false;
    }
  }

  /** Polls health until it answers, for at most `timeoutMs`. */
  async waitHealthy(timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (!(await this.health(Math.min(2_000, Math.max(1, until - Date.now()))))) {
      if (signal?.aborted) throw abortError(signal);
      if (Date.now() >= until) throw new Error(`env server ${this.address} did not answer health within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** One env-rollout: the server's episode, or an error (deadline, abort, lost server, success: false). */
  async run(req: RunRequest, deadlineMs: number, signal?: AbortSignal): Promise<Episode> {
    const reply = parse(runResponseSchema, await this.request("run", req, deadlineMs, signal), "run");
    if (!reply.success) throw new EnvServerError(`env server ${this.address}: run failed: ${reply.error ?? "(no error text)"}`);
    if (!reply.episode) throw new EnvServerError(`env server ${this.address}: run succeeded without an episode`);
    return reply.episode;
  }

  /** Asks the server to abort run `requestId`; true when a live run was found. */
  async cancel(requestId: string, timeoutMs = 2_000): Promise<boolean> {
    return parse(cancelResponseSchema, await this.request("cancel", { request_id: requestId }, timeoutMs), "cancel").cancelled;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.failAll((m) => new Error(`env server client closed during ${m}`));
    await this.sendChain.catch(() => undefined);
    // Closing the socket ends its event observer too (closing the observer first leaves its read failing).
    this.socket.close();
  }

  private request(method: string, payload: unknown, deadlineMs: number, signal?: AbortSignal): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error("env server client is closed"));
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const id = randomUUID().replaceAll("-", "");
    return new Promise<unknown>((resolve, reject) => {
      const finish = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.pending.delete(id);
      };
      const giveUp = (err: Error) => {
        finish();
        if (method === "run") this.sendCancel(id);
        reject(err);
      };
      const timer = setTimeout(() => giveUp(new TimeLimitError(`env server ${this.address} ${method}`, deadlineMs)), deadlineMs);
      const onAbort = () => giveUp(abortError(signal!));
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.set(id, {
        method,
        resolve: (data) => {
          finish();
          try {
            resolve(decode(data));
          } catch (e) {
            reject(new EnvServerError(`env server ${this.address}: ${method} reply is not msgpack: ${(e as Error).message}`));
          }
        },
        reject: (err) => {
          finish();
          reject(err);
        },
      });
      this.send([id, method, encode(payload)]).catch((e: Error) => this.pending.get(id)?.reject(e));
      this.receiveLoop();
    });
  }

  /** Best effort: the run is abandoned whatever the server says. */
  private sendCancel(runId: string): void {
    if (this.closed) return;
    this.send([randomUUID().replaceAll("-", ""), "cancel", encode({ request_id: runId })]).catch(() => undefined);
  }

  /** zeromq.js allows one send in progress per socket: sends queue behind each other. */
  private send(frames: [string, string, Uint8Array]): Promise<void> {
    const next = this.sendChain.then(() => this.socket.send(frames));
    this.sendChain = next.catch(() => undefined);
    return next;
  }

  /** One receive at a time, and only while replies are awaited, so an idle client holds nothing open. */
  private receiveLoop(): void {
    if (this.receiving) return;
    this.receiving = true;
    void (async () => {
      try {
        while (this.pending.size > 0 && !this.closed) {
          const frames = await this.socket.receive();
          if (frames.length !== 2) continue;
          this.pending.get(frames[0]!.toString())?.resolve(frames[1]!);
        }
      } catch (e) {
        if (!this.closed) this.failAll((m) => new Error(`env server ${this.address}: receive failed during ${m}: ${(e as Error).message}`));
      } finally {
        this.receiving = false;
      }
    })();
  }

  private failAll(make: (method: string) => Error): void {
    for (const p of [...this.pending.values()]) p.reject(make(p.method));
  }
}

function parse<T extends z.ZodTypeAny>(schema: T, value: unknown, what: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new EnvServerError(`env server ${what} reply does not follow the protocol: ${i.path.join(".") || "(reply)"}: ${i.message}`);
  }
  return r.data;
}

// The CodeSandbox environments use, over NATS. One-shot exec retries when a replica is lost (no
// responders, or no reply in time): a one-shot runs in a fresh sandbox, so running it again is safe.
// openSession returns at once and opens the session in the background, so the sandbox is ready by
// the time the model's first turn produces code; session commands are never retried (not idempotent).
import { nuid, RequestError, TimeoutError, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { ServiceErrorCodeHeader, ServiceErrorHeader } from "@nats-io/services";
import type {
  CodeSandbox,
  SandboxBatchRequest,
  SandboxBatchResult,
  SandboxExecRequest,
  SandboxExecResult,
  SandboxLanguage,
  SandboxSession,
} from "../environments/api/sandbox.js";
import { MessageValidationError } from "./msgpack-codec.js";
import {
  decodeBatchResult,
  decodeErrorBody,
  decodeExecResult,
  decodeSessionCloseReply,
  decodeSessionOpenReply,
  encodeBatchRequest,
  encodeExecRequest,
  encodeSessionClose,
  encodeSessionExec,
  encodeSessionOpen,
  SandboxServiceError,
  SandboxSubjects,
} from "./sandbox-protocol.js";

export { SandboxServiceError } from "./sandbox-protocol.js";

export interface NatsSandboxClientOptions {
  /**
   * Time to wait for a reply beyond the command's own wall limit (default 30 s): covers queueing at a
   * busy replica and a cold start. An attempt that gets no reply in wallMs + timeoutMs is retried.
   */
  timeoutMs?: number;
  /** Extra attempts for one-shot exec and session open when no replica answers (default 2). */
  retries?: number;
}

/** Wall limit a request runs under when it does not say (the service default). */
const DEFAULT_WALL_MS = 10_000;
const CLOSE_TIMEOUT_MS = 5_000;

function isLostReplica(e: unknown): boolean {
  if (e instanceof TimeoutError) return true;
  if (e instanceof RequestError) return e.isNoResponders() || e.cause instanceof TimeoutError;
  return false;
}

function replyOrThrow(m: Msg): Uint8Array {
  const codeHeader = m.headers?.get(ServiceErrorCodeHeader);
  if (codeHeader) {
    let message = m.headers?.get(ServiceErrorHeader) || "sandbox service error";
    try {
      message = decodeErrorBody(m.data).error.message;
    } catch {
      /* the header's description is enough */
    }
    throw new SandboxServiceError(Number(codeHeader) || 500, message);
  }
  return m.data;
}

function invalidRequest(e: unknown): Error {
  if (!(e instanceof MessageValidationError)) return e as Error;
  return new Error(`invalid sandbox request: ${e.message.replace(/^refusing to publish an invalid message: /, "")}`);
}

export class NatsSandboxClient implements CodeSandbox {
  private readonly timeoutMs: number;
  private readonly retries: number;

  constructor(
    private readonly nc: NatsConnection,
    opts: NatsSandboxClientOptions = {},
  ) {
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.retries = opts.retries ?? 2;
    if (!(this.timeoutMs > 0)) throw new Error(`NatsSandboxClient: timeoutMs must be > 0, got ${opts.timeoutMs}`);
    if (!Number.isInteger(this.retries) || this.retries < 0) throw new Error(`NatsSandboxClient: retries must be an integer >= 0, got ${opts.retries}`);
  }

  private async request(subject: string, data: Uint8Array, timeout: number, retry: boolean): Promise<Uint8Array> {
    const attempts = retry ? this.retries + 1 : 1;
    let last: unknown;
    for (let i = 0; i < attempts; i++) {
      try {
        return replyOrThrow(await this.nc.request(subject, data, { timeout }));
      } catch (e) {
        last = e;
        if (!isLostReplica(e) || i === attempts - 1) break;
        // Back off briefly: a replacement replica may be subscribing right now.
        await new Promise((r) => setTimeout(r, 100 * 2 ** i));
      }
    }
    if (isLostReplica(last)) {
      const why = last instanceof RequestError && last.isNoResponders() ? "no sandbox service is running" : "no reply in time";
      throw new SandboxServiceError(503, `sandbox request on ${subject} failed after ${attempts} attempt(s): ${why}`);
    }
    throw last;
  }

  private timeoutFor(req: SandboxExecRequest): number {
    return (req.limits?.wallMs ?? DEFAULT_WALL_MS) + this.timeoutMs;
  }

  async exec(req: SandboxExecRequest): Promise<SandboxExecResult> {
    let data: Uint8Array;
    try {
      data = encodeExecRequest(req);
    } catch (e) {
      throw invalidRequest(e);
    }
    return decodeExecResult(await this.request(SandboxSubjects.exec, data, this.timeoutFor(req), true));
  }

  /**
   * One program against many inputs in one request; each case runs like a one-shot exec (fresh process,
   * emptied work dir) and gets its own result and verdict. Retried like exec (running it again is safe).
   */
  async execBatch(req: SandboxBatchRequest): Promise<SandboxBatchResult> {
    let data: Uint8Array;
    try {
      data = encodeBatchRequest(req);
    } catch (e) {
      throw invalidRequest(e);
    }
    const budget = req.batchWallMs ?? (req.limits?.wallMs ?? DEFAULT_WALL_MS) * req.cases.length;
    return decodeBatchResult(await this.request(SandboxSubjects.execBatch, data, budget + this.timeoutMs, true));
  }

  /** Returns at once; the open runs in the background and the first exec waits for it. */
  async openSession(opts: { language?: SandboxLanguage; idleTimeoutMs?: number } = {}): Promise<SandboxSession> {
    const id = nuid.next();
    const data = encodeSessionOpen({ sessionId: id, language: opts.language, idleTimeoutMs: opts.idleTimeoutMs });
    const opened = this.request(SandboxSubjects.sessionOpen, data, this.timeoutMs, true).then((d) => decodeSessionOpenReply(d).instance);
    // The failure surfaces on the first exec; until then nobody may be awaiting it.
    opened.catch(() => undefined);
    return new NatsSandboxSession(id, opened, this);
  }

  /** @internal used by sessions */
  async sessionExec(instance: string, id: string, req: SandboxExecRequest): Promise<SandboxExecResult> {
    let data: Uint8Array;
    try {
      data = encodeSessionExec({ ...req, sessionId: id });
    } catch (e) {
      throw invalidRequest(e);
    }
    try {
      return decodeExecResult(await this.request(SandboxSubjects.sessionExec(instance), data, this.timeoutFor(req), false));
    } catch (e) {
      if (e instanceof SandboxServiceError && e.code === 503) {
        throw new SandboxServiceError(410, `session ${id} is lost: the replica holding it does not answer (${e.message})`);
      }
      throw e;
    }
  }

  /** @internal used by sessions */
  async sessionClose(instance: string, id: string): Promise<boolean> {
    const d = await this.request(SandboxSubjects.sessionClose(instance), encodeSessionClose({ sessionId: id }), CLOSE_TIMEOUT_MS, false);
    return decodeSessionCloseReply(d).closed;
  }
}

class NatsSandboxSession implements SandboxSession {
  private closed = false;

  constructor(
    readonly id: string,
    private readonly opened: Promise<string>,
    private readonly client: NatsSandboxClient,
  ) {}

  async exec(req: SandboxExecRequest): Promise<SandboxExecResult> {
    if (this.closed) throw new Error(`sandbox session ${this.id} is closed`);
    const instance = await this.opened;
    return this.client.sessionExec(instance, this.id, req);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    let instance: string;
    try {
      instance = await this.opened;
    } catch {
      return; // never opened: nothing to close
    }
    try {
      await this.client.sessionClose(instance, this.id);
    } catch (e) {
      // The replica is gone (its sessions with it) or busy: the idle timeout closes it in any case.
      if (!(e instanceof SandboxServiceError)) throw e;
    }
  }
}

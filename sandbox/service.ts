// The NATS face of the sandbox: a `@nats-io/services` micro service (so `nats micro ls/info/stats`
// show it) with msgpack endpoints validated at the edge. A bad request gets an error reply and the
// service goes on; work beyond capacity queues in the executor instead of being dropped.
import type { NatsConnection } from "@nats-io/transport-node";
import { Svcm, type Service, type ServiceMsg } from "@nats-io/services";
import type { Logger } from "pino";
import {
  MessageValidationError,
  decodeBatchRequest,
  decodeExecRequest,
  decodeSessionClose,
  decodeSessionExec,
  decodeSessionOpen,
  encodeBatchResult,
  encodeErrorBody,
  encodeExecResult,
  encodeSessionCloseReply,
  encodeSessionOpenReply,
  SANDBOX_QUEUE_GROUP,
  SANDBOX_SERVICE_NAME,
  SANDBOX_SERVICE_VERSION,
  SandboxSubjects,
} from "../streams/index.js";
import { SandboxRequestError } from "./errors.js";
import { SandboxExecutor } from "./executor.js";
import { SandboxFailure } from "./sandbox-process.js";
import type { SandboxSettings, SandboxSettingsInput } from "./settings.js";

export interface SandboxServiceHandle {
  /** Stops taking requests, lets running ones finish (settings.drainMs), then kills every sandbox. */
  stop(): Promise<void>;
  stats(): Record<string, number>;
  /** This replica's id (part of its session subjects). */
  readonly instance: string;
  readonly executor: SandboxExecutor;
}

/** Reply bodies must fit the server's max_payload; output caps are kept below it with this margin. */
const REPLY_OVERHEAD_BYTES = 64 * 1024;

export async function startSandboxService(opts: {
  nc: NatsConnection;
  log: Logger;
  settings: SandboxSettings | SandboxSettingsInput;
}): Promise<SandboxServiceHandle> {
  const { nc, log } = opts;
  const executor = await SandboxExecutor.create(opts.settings, log);
  const maxPayload = nc.info?.max_payload ?? 1024 * 1024;
  // stdout and stderr are each capped; both must fit one reply.
  executor.setOutputCeiling(Math.floor((maxPayload - REPLY_OVERHEAD_BYTES) / 2));
  const counters = { malformed: 0, internalErrors: 0 };

  let svc: Service;
  try {
    // @nats-io/services 3.0.0-25 pins its own nats-core types; the connection is the same object at run time.
    svc = await new Svcm(nc as unknown as ConstructorParameters<typeof Svcm>[0]).add({
      name: SANDBOX_SERVICE_NAME,
      version: SANDBOX_SERVICE_VERSION,
      description: "Runs untrusted python/node/bash in bubblewrap sandboxes (one-shot or batched on reused warm sandboxes, or sessions)",
      queue: SANDBOX_QUEUE_GROUP,
      metadata: {
        isolation: executor.isolation.lines.join(" | ").slice(0, 2000),
        bwrap: executor.isolation.bwrap,
        python: executor.isolation.runtimes.python,
        node: executor.isolation.runtimes.node ?? "unavailable",
      },
      statsHandler: async () => ({ ...executor.stats(), malformed_total: counters.malformed, internal_errors_total: counters.internalErrors }),
    });
  } catch (e) {
    await executor.close();
    throw e;
  }
  const instance = svc.info().id;

  const fail = (msg: ServiceMsg, e: unknown, what: string) => {
    let code = 500;
    let message: string;
    if (e instanceof MessageValidationError) {
      code = 400;
      counters.malformed++;
      message = e.message;
    } else if (e instanceof SandboxRequestError) {
      code = e.code;
      message = e.message;
    } else {
      counters.internalErrors++;
      message = e instanceof SandboxFailure ? `sandbox failure: ${e.message}` : `internal error: ${(e as Error)?.message ?? String(e)}`;
      log.error({ err: message, what }, "sandbox request failed");
    }
    // The description travels in a header: one line, bounded.
    const description = message.replace(/[\r\n]+/g, " ").slice(0, 512);
    try {
      msg.respondError(code, description, encodeErrorBody(code, message.slice(0, 16_384)));
    } catch (err) {
      log.warn({ err: (err as Error).message }, "could not send error reply");
    }
  };

  const replies = new ReplyBatch();
  const serve = (what: string, work: (msg: ServiceMsg) => Promise<Uint8Array>) => (err: Error | null, msg: ServiceMsg) => {
    if (err) {
      log.error({ err: err.message, what }, "sandbox endpoint subscription failed");
      return;
    }
    // Handlers return at once; the work runs (or queues) asynchronously so one slow command never
    // holds up the subscription.
    work(msg).then(
      (body) =>
        replies.later(() => {
          try {
            msg.respond(body);
          } catch (e) {
            log.warn({ err: (e as Error).message, what }, "could not send reply");
          }
        }),
      (e) => fail(msg, e, what),
    );
  };

  svc.addEndpoint("exec", {
    subject: SandboxSubjects.exec,
    metadata: { description: "one-shot execution on a warm sandbox (fresh process, emptied work dir); msgpack SandboxExecRequest -> SandboxExecResult" },
    handler: serve("exec", async (msg) => encodeExecResult(await executor.exec(decodeExecRequest(msg.data)))),
  });
  svc.addEndpoint("exec-batch", {
    subject: SandboxSubjects.execBatch,
    metadata: { description: "one program against many inputs, each case a fresh process; msgpack SandboxBatchRequest -> SandboxBatchResult" },
    handler: serve("exec-batch", async (msg) => encodeBatchResult(await executor.execBatch(decodeBatchRequest(msg.data)))),
  });
  svc.addEndpoint("session-open", {
    subject: SandboxSubjects.sessionOpen,
    metadata: { description: "open a session; the reply names the replica that holds it" },
    handler: serve("session-open", async (msg) => {
      const req = decodeSessionOpen(msg.data);
      await executor.openSession(req.sessionId, { language: req.language, idleTimeoutMs: req.idleTimeoutMs });
      return encodeSessionOpenReply({ sessionId: req.sessionId, instance });
    }),
  });
  // Only this replica listens on its own session subjects, so no queue group is needed there.
  svc.addEndpoint("session-exec", {
    subject: SandboxSubjects.sessionExec(instance),
    queue: "",
    metadata: { description: "run a command in a session of this replica" },
    handler: serve("session-exec", async (msg) => {
      const { sessionId, ...req } = decodeSessionExec(msg.data);
      return encodeExecResult(await executor.sessionExec(sessionId, req));
    }),
  });
  svc.addEndpoint("session-close", {
    subject: SandboxSubjects.sessionClose(instance),
    queue: "",
    metadata: { description: "close a session of this replica (idempotent)" },
    handler: serve("session-close", async (msg) => {
      const { sessionId } = decodeSessionClose(msg.data);
      return encodeSessionCloseReply({ sessionId, closed: await executor.closeSession(sessionId) });
    }),
  });
  log.info(
    { instance, subjects: [SandboxSubjects.exec, SandboxSubjects.execBatch, SandboxSubjects.sessionOpen, SandboxSubjects.sessionExec(instance)] },
    "sandbox service up",
  );

  let stopped = false;
  return {
    instance,
    executor,
    stats: () => ({ ...executor.stats(), malformed_total: counters.malformed, internal_errors_total: counters.internalErrors }),
    async stop() {
      if (stopped) return;
      stopped = true;
      await svc.stop().catch(() => undefined);
      await executor.drain(executor.settings.drainMs);
      await executor.close();
      log.info("sandbox service stopped");
    },
  };
}

/**
 * Replies of one event-loop turn go out together: each result arrives on its own sandbox pipe, in its
 * own callback, and nats.js writes what was published in a callback as one socket write. Publishing them
 * from one setImmediate (run right after the poll phase that read the results) makes that one write for
 * all of them: each loopback write that wakes nats-server costs CPU, most on a VM.
 */
class ReplyBatch {
  private queued: Array<() => void> = [];
  later(send: () => void): void {
    this.queued.push(send);
    if (this.queued.length === 1) setImmediate(() => this.flush());
  }
  private flush(): void {
    const q = this.queued;
    this.queued = [];
    for (const send of q) send();
  }
}

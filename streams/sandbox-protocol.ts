// The wire of the sandbox service (`rollstream-sandbox`, DESIGN §3): subjects, and the msgpack
// bodies of requests and replies, each validated with zod at both ends. Error replies carry the
// micro-service error headers (Nats-Service-Error / -Code) and a msgpack body saying what is wrong.
import { z } from "zod";
import { decodeMsgpack, encodeMsgpack } from "./msgpack-codec.js";

export const SANDBOX_SERVICE_NAME = "rollstream-sandbox";
export const SANDBOX_SERVICE_VERSION = "1.0.0";
/** Replicas share one queue group, so each request reaches exactly one of them. */
export const SANDBOX_QUEUE_GROUP = "rollstream-sandbox";

/**
 * exec and session.open go to any replica (queue group). A session lives on the replica that opened
 * it, so its exec/close subjects carry that replica's instance id (returned by open).
 */
export const SandboxSubjects = {
  exec: "rs.sandbox.exec",
  /** One program against many inputs (SandboxBatchRequest -> SandboxBatchResult); any replica. */
  execBatch: "rs.sandbox.exec.batch",
  sessionOpen: "rs.sandbox.session.open",
  sessionExec: (instance: string) => `rs.sandbox.session.${instance}.exec`,
  sessionClose: (instance: string) => `rs.sandbox.session.${instance}.close`,
} as const;

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
export const SessionIdSchema = z.string().regex(TOKEN, "session id: 1-64 characters from [A-Za-z0-9_-]");
export const InstanceIdSchema = z.string().regex(TOKEN, "instance id: 1-64 characters from [A-Za-z0-9_-]");

export const SandboxLanguageSchema = z.enum(["python", "node", "bash"]);

const posInt = () => z.number().int().positive();

export const SandboxLimitsSchema = z
  .object({
    wallMs: posInt().optional(),
    cpuMs: posInt().optional(),
    memoryMb: posInt().optional(),
    maxProcesses: posInt().optional(),
    maxOutputBytes: posInt().optional(),
    maxFileBytes: posInt().optional(),
  })
  .strict();

/** Relative path inside the work dir: no absolute paths, no `..`, no empty or NUL-containing parts. */
export const SandboxFilePathSchema = z
  .string()
  .min(1)
  .max(1024)
  .refine((p) => !p.startsWith("/"), "file path must be relative to the work dir")
  .refine((p) => !p.includes("\0"), "file path must not contain NUL")
  .refine((p) => p.split("/").every((part) => part !== ".." && part !== ""), "file path must not contain '..' or empty parts");

export const MAX_CODE_BYTES = 4 * 1024 * 1024;

export const SandboxExecRequestSchema = z
  .object({
    language: SandboxLanguageSchema,
    code: z.string().max(MAX_CODE_BYTES),
    stdin: z.string().optional(),
    files: z
      .record(z.string(), z.string())
      .superRefine((files, ctx) => {
        const names = Object.keys(files);
        if (names.length > 1000) ctx.addIssue({ code: "custom", message: `at most 1000 files, got ${names.length}` });
        for (const name of names) {
          const r = SandboxFilePathSchema.safeParse(name);
          // Name the offending path and the rule it breaks (zod's own record-key error says neither).
          if (!r.success) ctx.addIssue({ code: "custom", path: [name], message: `bad file path ${JSON.stringify(name)}: ${r.error.issues[0]?.message}` });
        }
      })
      .optional(),
    limits: SandboxLimitsSchema.optional(),
  })
  .strict();

export const SandboxExecResultSchema = z.object({
  stdout: z.string(),
  stderr: z.string(),
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  timedOut: z.boolean(),
  outOfMemory: z.boolean(),
  outputTruncated: z.boolean(),
  wallMs: z.number().nonnegative(),
  cpuMs: z.number().nonnegative(),
});

export const MAX_BATCH_CASES = 1000;

export const SandboxCaseSchema = z.object({ stdin: z.string().optional(), expectedStdout: z.string().optional() }).strict();

export const SandboxBatchRequestSchema = z
  .object({
    language: SandboxLanguageSchema,
    code: z.string().max(MAX_CODE_BYTES),
    files: SandboxExecRequestSchema.shape.files,
    cases: z.array(SandboxCaseSchema).min(1).max(MAX_BATCH_CASES),
    limits: SandboxLimitsSchema.optional(),
    batchWallMs: posInt().optional(),
    stopOnFailure: z.boolean().optional(),
  })
  .strict();

export const SandboxVerdictSchema = z.enum(["passed", "failed", "error", "timeout", "oom", "output-limit", "skipped"]);

export const SandboxBatchResultSchema = z.object({
  results: z.array(SandboxExecResultSchema.extend({ verdict: SandboxVerdictSchema })),
  passed: z.number().int().nonnegative(),
  wallMs: z.number().nonnegative(),
});

export const SessionOpenRequestSchema = z
  .object({
    sessionId: SessionIdSchema,
    language: SandboxLanguageSchema.optional(),
    idleTimeoutMs: posInt().optional(),
  })
  .strict();

export const SessionOpenReplySchema = z.object({ sessionId: SessionIdSchema, instance: InstanceIdSchema });

export const SessionExecRequestSchema = SandboxExecRequestSchema.extend({ sessionId: SessionIdSchema }).strict();

export const SessionCloseRequestSchema = z.object({ sessionId: SessionIdSchema }).strict();
export const SessionCloseReplySchema = z.object({ sessionId: SessionIdSchema, closed: z.boolean() });

export const SandboxErrorBodySchema = z.object({ error: z.object({ code: z.number().int(), message: z.string() }) });

export type SessionOpenRequest = z.output<typeof SessionOpenRequestSchema>;
export type SessionOpenReply = z.output<typeof SessionOpenReplySchema>;
export type SessionExecRequest = z.output<typeof SessionExecRequestSchema>;
export type SessionCloseRequest = z.output<typeof SessionCloseRequestSchema>;
export type SessionCloseReply = z.output<typeof SessionCloseReplySchema>;
export type SandboxErrorBody = z.output<typeof SandboxErrorBodySchema>;

export const encodeExecRequest = (v: z.input<typeof SandboxExecRequestSchema>) => encodeMsgpack(SandboxExecRequestSchema, v);
export const decodeExecRequest = (d: Uint8Array) => decodeMsgpack(SandboxExecRequestSchema, d, "sandbox exec request");
export const encodeExecResult = (v: z.input<typeof SandboxExecResultSchema>) => encodeMsgpack(SandboxExecResultSchema, v);
export const decodeExecResult = (d: Uint8Array) => decodeMsgpack(SandboxExecResultSchema, d, "sandbox exec result");
export const encodeBatchRequest = (v: z.input<typeof SandboxBatchRequestSchema>) => encodeMsgpack(SandboxBatchRequestSchema, v);
export const decodeBatchRequest = (d: Uint8Array) => decodeMsgpack(SandboxBatchRequestSchema, d, "sandbox batch request");
export const encodeBatchResult = (v: z.input<typeof SandboxBatchResultSchema>) => encodeMsgpack(SandboxBatchResultSchema, v);
export const decodeBatchResult = (d: Uint8Array) => decodeMsgpack(SandboxBatchResultSchema, d, "sandbox batch result");
export const encodeSessionOpen = (v: SessionOpenRequest) => encodeMsgpack(SessionOpenRequestSchema, v);
export const decodeSessionOpen = (d: Uint8Array) => decodeMsgpack(SessionOpenRequestSchema, d, "session open request");
export const encodeSessionOpenReply = (v: SessionOpenReply) => encodeMsgpack(SessionOpenReplySchema, v);
export const decodeSessionOpenReply = (d: Uint8Array) => decodeMsgpack(SessionOpenReplySchema, d, "session open reply");
export const encodeSessionExec = (v: z.input<typeof SessionExecRequestSchema>) => encodeMsgpack(SessionExecRequestSchema, v);
export const decodeSessionExec = (d: Uint8Array) => decodeMsgpack(SessionExecRequestSchema, d, "session exec request");
export const encodeSessionClose = (v: SessionCloseRequest) => encodeMsgpack(SessionCloseRequestSchema, v);
export const decodeSessionClose = (d: Uint8Array) => decodeMsgpack(SessionCloseRequestSchema, d, "session close request");
export const encodeSessionCloseReply = (v: SessionCloseReply) => encodeMsgpack(SessionCloseReplySchema, v);
export const decodeSessionCloseReply = (d: Uint8Array) => decodeMsgpack(SessionCloseReplySchema, d, "session close reply");
export const encodeErrorBody = (code: number, message: string) => encodeMsgpack(SandboxErrorBodySchema, { error: { code, message } });
export const decodeErrorBody = (d: Uint8Array) => decodeMsgpack(SandboxErrorBodySchema, d, "sandbox error reply");

/** A request the service refused or could not serve (the service error code follows HTTP). */
export class SandboxServiceError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = "SandboxServiceError";
  }
}

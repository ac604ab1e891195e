// Server-sent events as vLLM and the OpenAI API stream them: `data: <json>\n\n` per chunk, `data: [DONE]` last.
// And the signal every request carries: aborted when the caller hangs up before its answer, so the engine stops
// generating for nobody.
import type { FastifyReply } from "fastify";

export class SseStream {
  constructor(private readonly reply: FastifyReply) {
    reply.hijack();
    reply.raw.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  }

  send(chunk: unknown): void {
    if (!this.reply.raw.writableEnded) this.reply.raw.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }

  /** An error after the stream started: one error event (vLLM's shape), then the end. */
  fail(message: string): void {
    this.send({ error: { message, type: "InternalServerError", param: null, code: 500 } });
    this.end();
  }

  end(): void {
    if (this.reply.raw.writableEnded) return;
    this.reply.raw.write("data: [DONE]\n\n");
    this.reply.raw.end();
  }
}

/** Aborted when the connection closes before the answer was written. */
export function callerGone(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) ac.abort(new Error("the caller went away"));
  });
  return ac.signal;
}

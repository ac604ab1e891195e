// Bad requests end at the edge with a 4xx and one line that names the field, never a crash or a 500: every body,
// query and parameter is parsed with zod before anything reaches the engine.
import type { FastifyInstance, FastifyReply } from "fastify";
import type { z } from "zod";

export class BadRequest extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
    this.name = "BadRequest";
  }
}

/** The value parsed by `schema`, or a BadRequest naming the first wrong field. */
export function parseWith<T extends z.ZodType>(schema: T, value: unknown, what: string): z.output<T> {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const at = issue.path.length ? issue.path.join(".") : what;
  throw new BadRequest(`${at}: ${issue.message}`.replace(/\s+/g, " "));
}

/** vLLM's ErrorResponse ({error: {message, type, param, code}}), the shape the OpenAI client reads. */
export function sendOpenAIError(reply: FastifyReply, status: number, message: string): FastifyReply {
  const type = status === 404 ? "NotFoundError" : status < 500 ? "BadRequestError" : "InternalServerError";
  return reply.code(status).send({ error: { message, type, param: null, code: status } });
}

/**
 * One error handler for the app: a BadRequest or a 4xx from fastify itself (malformed JSON, an unsupported
 * content type, a body too large) answers its status with one line; anything else is the server's fault (500)
 * and is logged.
 */
export function installErrorHandler(app: FastifyInstance, log: (e: Error) => void): void {
  app.setErrorHandler((e: Error & { statusCode?: number }, _req, reply) => {
    if (e instanceof BadRequest) return sendOpenAIError(reply, e.status, e.message);
    const status = e.statusCode ?? 500;
    if (status >= 400 && status < 500) return sendOpenAIError(reply, status, e.message.replace(/\s+/g, " "));
    log(e);
    return sendOpenAIError(reply, 500, e.message.replace(/\s+/g, " "));
  });
  app.setNotFoundHandler((req, reply) => sendOpenAIError(reply, 404, `no route ${req.method} ${req.url.split("?")[0]}`));
}

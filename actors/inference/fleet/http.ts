// JSON over HTTP to an inference server, every call with a deadline. Errors say whose fault they are: a
// ServerDown (unreachable, 5xx, past its deadline, an answer that is not the protocol) takes the server out of
// rotation and the request is retried elsewhere; a RequestRejected (4xx) is this request's own problem and
// would fail on any server, so it is not retried.
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
    body: string,
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

/** The answer's text; throws ServerDown or RequestRejected as above. */
export async function call(url: string, body: unknown, opts: CallOptions & { method?: "GET" | "POST" }): Promise<string> {
  const deadline = AbortSignal.timeout(opts.deadlineMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, {
      method: opts.method ?? (body === undefined ? "GET" : "POST"),
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    text = await res.text();
  } catch (e) {
    // The caller's own abort is not the server's fault: let it through as it is.
    if (opts.signal?.aborted) throw opts.signal.reason ?? e;
    if (deadline.aborted) throw new ServerDown(url, `no answer within ${opts.deadlineMs} ms`);
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new ServerDown(url, `unreachable (${cause?.code ?? cause?.message ?? (e as Error).message})`);
  }
  if (res.status >= 500) throw new ServerDown(url, `answered ${res.status}: ${text.slice(0, 300)}`);
  if (res.status >= 400) throw new RequestRejected(url, res.status, text);
  return text;
}

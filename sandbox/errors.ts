// Errors the service turns into error replies: the code follows HTTP so that `nats micro` users and
// clients read it without a table (400 bad request, 404 unknown session, 410 session lost,
// 503 over capacity, 500 our fault).
export class SandboxRequestError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = "SandboxRequestError";
  }
}

export const badRequest = (m: string) => new SandboxRequestError(400, m);
export const notFound = (m: string) => new SandboxRequestError(404, m);
export const gone = (m: string) => new SandboxRequestError(410, m);
export const overloaded = (m: string) => new SandboxRequestError(503, m);

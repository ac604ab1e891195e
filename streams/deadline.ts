// A deadline for a call that can block. Some client calls wait forever when the server that held their
// state is gone (an object-store read whose consumer was on a killed cluster member never completes):
// the caller gets a DeadlineError naming the call instead of a hang, and decides whether to retry.
export class DeadlineError extends Error {
  override readonly name = "DeadlineError";
  constructor(
    readonly call: string,
    readonly ms: number,
  ) {
    super(`${call}: no answer within ${ms} ms`);
  }
}

/** Resolves or rejects as `p` does, or rejects with DeadlineError after `ms`. */
export function withDeadline<T>(p: Promise<T>, ms: number, call: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(call, ms)), ms);
  });
  // A late rejection of the abandoned call must not become an unhandled rejection.
  p.catch(() => undefined);
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}

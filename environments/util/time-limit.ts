/** Thrown when work exceeds its time limit; `label` names the work in the message. */
export class TimeLimitError extends Error {
  constructor(
    readonly label: string,
    readonly ms: number,
  ) {
    super(`${label} timed out after ${ms} ms`);
    this.name = "TimeLimitError";
  }
}

/**
 * Runs fn with a time limit. fn gets an AbortSignal that fires at the limit (or when parent aborts) so
 * cooperative work can stop; work that ignores it is abandoned, never awaited forever. Synchronous CPU
 * work cannot be interrupted this way: run it in a worker (see timed-worker.ts).
 */
export async function withTimeLimit<T>(ms: number, label: string, fn: (signal: AbortSignal) => T | Promise<T>, parent?: AbortSignal): Promise<T> {
  if (parent?.aborted) throw abortError(parent);
  const ac = new AbortController();
  let stop!: (err: Error) => void;
  const stopped = new Promise<never>((_, reject) => {
    stop = reject;
  });
  stopped.catch(() => undefined);
  const halt = (err: Error) => {
    ac.abort(err);
    stop(err);
  };
  const onParentAbort = () => halt(abortError(parent!));
  parent?.addEventListener("abort", onParentAbort, { once: true });
  const timer = Number.isFinite(ms) ? setTimeout(() => halt(new TimeLimitError(label, ms)), ms) : undefined;
  try {
    const work = Promise.resolve().then(() => fn(ac.signal));
    // An abandoned work promise may reject later; keep that from becoming an unhandled rejection.
    work.catch(() => undefined);
    return await Promise.race([work, stopped]);
  } finally {
    if (timer) clearTimeout(timer);
    parent?.removeEventListener("abort", onParentAbort);
  }
}

/** Rejects as soon as signal aborts, otherwise settles like p. */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    p.catch(() => undefined);
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      p.catch(() => undefined);
      reject(abortError(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

export function abortError(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r;
  const e = new Error(typeof r === "string" ? r : "aborted");
  e.name = "AbortError";
  return e;
}

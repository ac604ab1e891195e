// Failures of the messaging system rather than of the message: a server restarting, a cluster electing a
// leader, a request whose timer ran out while the process was stopped. Known by the client libraries'
// error names (they differ between packages and versions less than their messages do), down the cause chain.
const NAMES = new Set([
  "JetStreamNotEnabled",
  "TimeoutError",
  "NoRespondersError",
  "ConnectionError",
  "ClosedConnectionError",
  "DrainingConnectionError",
  "DeadlineError",
]);

/**
 * The NATS store is full: JetStream answers "insufficient resources" (10023; 10047 "insufficient storage
 * resources") when its disk or its max_file_store has no room left. Said as such, not as an outage of NATS;
 * it keeps its cause, so the calls that wait out an outage (the status is 503) wait for room the same way.
 */
export class DiskFullError extends Error {
  override name = "DiskFullError";
}

/** Whether `e` (or a cause of it) is JetStream saying its store has no room left. */
export function isStoreFull(e: unknown): boolean {
  for (const x of causes(e)) {
    const code = (x as { code?: unknown }).code;
    if (x.name === "JetStreamApiError" && (code === 10023 || code === 10047)) return true;
    if (/insufficient (storage )?resources/i.test(x.message)) return true;
  }
  return false;
}

/** Whether `e` (or a cause of it) is a local disk with no room left (ENOSPC, or EDQUOT: a quota spent). */
export function isNoRoomOnDisk(e: unknown): boolean {
  for (const x of causes(e)) {
    const code = (x as { code?: unknown }).code;
    if (code === "ENOSPC" || code === "EDQUOT") return true;
  }
  return false;
}

/**
 * A local folder the work must write cannot be written (read-only, immutable, no permission, no room): a
 * person has to act, and the work then succeeds as it is. The message names the folder and what to do.
 */
export class StorageBlockedError extends Error {
  override name = "StorageBlockedError";
}

/** Any storage that cannot take the work's writes now: the NATS store full (DiskFullError, "insufficient
 *  resources"), a local disk full, a folder not writable. Work that fails of it waits for a person to make room
 *  instead of spending its retries, and goes on as it is once they have. */
export function isDiskFull(e: unknown): boolean {
  for (const x of causes(e)) if (x instanceof DiskFullError || x instanceof StorageBlockedError) return true;
  return isStoreFull(e) || isNoRoomOnDisk(e);
}

/** The error and its causes, at most five deep. */
function* causes(e: unknown): Generator<Error> {
  let x: unknown = e;
  for (let depth = 0; x instanceof Error && depth < 5; depth++, x = x.cause) yield x;
}

export function isInfrastructureError(e: unknown): boolean {
  for (const x of causes(e)) {
    if (NAMES.has(x.name)) return true;
    // 503: "JetStream system temporarily unavailable" (no quorum, no leader yet).
    if (x.name === "JetStreamApiError" && (x as { status?: number }).status === 503) return true;
    if (/^jetstream (is )?not enabled/i.test(x.message)) return true;
  }
  return false;
}

/**
 * Back-off before each new try of a call that failed for the messaging system's sake (~18 s in all): a
 * cluster elects a new stream leader in a few seconds, and an actor that died of it instead lost its
 * in-memory state and cost a restart (a learner restores its checkpoint).
 */
export const INFRA_RETRY_DELAYS_MS: readonly number[] = [250, 500, 1000, 2000, 4000, 5000, 5000];

/**
 * Runs `call` again while it fails with an infrastructure error, after each of `delaysMs`; any other
 * error, or the last failure, is thrown. Only for calls that are safe to repeat: reads, KV puts of one
 * value, publishes with a msg-id (the server keeps the first), object puts under one name.
 */
export async function retryInfrastructure<T>(call: () => Promise<T>, delaysMs: readonly number[] = INFRA_RETRY_DELAYS_MS): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      // A connection this process closed (shutting down) does not come back.
      if (attempt >= delaysMs.length || !isInfrastructureError(e) || isClosedConnection(e)) throw e;
      await new Promise((r) => setTimeout(r, delaysMs[attempt]));
    }
  }
}

function isClosedConnection(e: unknown): boolean {
  for (const x of causes(e)) if (x.name === "ClosedConnectionError" || x.name === "DrainingConnectionError") return true;
  return false;
}

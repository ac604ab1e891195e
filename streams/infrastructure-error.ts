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

export function isInfrastructureError(e: unknown): boolean {
  let x: unknown = e;
  for (let depth = 0; x instanceof Error && depth < 5; depth++, x = x.cause) {
    if (NAMES.has(x.name)) return true;
    // 503: "JetStream system temporarily unavailable" (no quorum, no leader yet).
    if (x.name === "JetStreamApiError" && (x as { status?: number }).status === 503) return true;
    if (/^jetstream (is )?not enabled/i.test(x.message)) return true;
  }
  return false;
}

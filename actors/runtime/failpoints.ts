// Fault injection for the fault tests, as etcd's gofail or FoundationDB's buggify: an actor process kills
// itself (SIGKILL, like a native crash or the OOM killer) when it reaches a named point with a matching
// item. Off unless ROLLSTREAM_FAILPOINTS names the point, e.g. `learner.train=clus:0:12,reward.score=clus:0:3`
// (the value is matched against the task id the actor is working on). A few points change a behaviour instead
// (armed()): `lease.ignore=learner` makes a singleton work without its lease, as before there were leases.
const spec = parse(process.env["ROLLSTREAM_FAILPOINTS"] ?? "");

function parse(s: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const part of s.split(",")) {
    const eq = part.indexOf("=");
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, new Set());
    out.get(name)!.add(part.slice(eq + 1).trim());
  }
  return out;
}

/** Dies on the spot when the failpoint `name` is armed for one of `items`. */
export function failpoint(name: string, items: Iterable<string>): void {
  const armed = spec.get(name);
  if (!armed) return;
  for (const item of items) {
    if (armed.has(item)) {
      process.stderr.write(`failpoint ${name} hit on ${item}: killing this process\n`);
      process.kill(process.pid, "SIGKILL");
    }
  }
}

/** Whether the failpoint `name` is armed for `item`: a behaviour to change rather than a death. */
export function armed(name: string, item: string): boolean {
  return spec.get(name)?.has(item) === true;
}

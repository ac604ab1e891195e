// What `train` says while its NATS server is away: one line when it goes, one when it is back with how
// long it was gone. The actors reconnect on their own (or are restarted and wait for the server); train
// only has to keep waiting instead of failing on the first timeout.
export class OutageReport {
  private since: number | null = null;
  /** Seconds of every outage so far. */
  readonly outages: number[] = [];

  constructor(private readonly say: (line: string) => void) {}

  down(e: unknown): void {
    if (this.since !== null) return;
    this.since = Date.now();
    this.say(`NATS unreachable (${(e as Error).message}): waiting for it; actors reconnect and pending work resumes`);
  }

  up(): void {
    if (this.since === null) return;
    const s = (Date.now() - this.since) / 1000;
    this.outages.push(s);
    this.since = null;
    this.say(`NATS back after ${s.toFixed(1)} s`);
  }
}

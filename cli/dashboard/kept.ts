// What keeps the dashboard answering when the run's server goes away (a finished `train` stops its own
// nats-server; a crashed one just vanishes). Every read the dashboard makes goes through a Kept value: the
// last value read is kept, at most one read is in flight (callers during a read share it, so page requests
// and server-sent pushes never queue up reads behind each other), and a caller waits for that read only
// while it makes progress, STALL_MS without any, MAX_WAIT_MS in all; then it gets what is kept and the read
// finishes (or fails) in the background. While the connection is down no read starts at all: the answer is
// what was read before, at once, and the overview says the server is unreachable.
import type { NatsConnection } from "@nats-io/transport-node";

/** A route waits this long for a read that makes no progress (a server gone or stopped). */
export const STALL_MS = 2_000;
/** A route waits at most this long for a read that keeps making progress (a long run's first read). */
export const MAX_WAIT_MS = 10_000;

export type ServerState = "connected" | "unreachable" | "not answering";

/** The connection's own view of the server: down from its "disconnect" event until "reconnect" or close. */
export class Link {
  up: boolean;
  /** Since when `up` has its value (ms). */
  since = Date.now();
  /** Aborted when the dashboard closes: waiting reads return at once. */
  readonly closing = new AbortController();

  constructor(readonly nc: NatsConnection) {
    this.up = !nc.isClosed();
    (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") this.set(false);
        else if (s.type === "reconnect") this.set(true);
      }
    })().catch(() => undefined);
    void nc.closed().then(() => this.set(false));
  }

  private set(up: boolean): void {
    if (up === this.up) return;
    this.up = up;
    this.since = Date.now();
  }

  /** Whether a read may start now. */
  get usable(): boolean {
    return this.up && !this.closing.signal.aborted;
  }
}

/** Resolves true when `p` settles within `ms`, false after `ms` (p runs on). */
function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((r) => {
      timer = setTimeout(() => r(false), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** A value read from the server and kept; see the file's comment. */
export class Kept<T> {
  private reading: Promise<void> | null = null;
  private again = false;
  private progressAt = 0;

  constructor(
    protected readonly link: Link,
    public value: T,
    private readonly read?: (prev: T) => Promise<T>,
  ) {}

  /** One read, from the value kept so far (a subclass reads its own way). */
  protected load(prev: T): Promise<T> {
    return this.read ? this.read(prev) : Promise.resolve(prev);
  }

  /**
   * Starts a read unless the server is unreachable; returns the read in flight, if any. Asked during a read,
   * another follows it (the one in flight may have started before what the caller wants to see was stored).
   */
  start(): Promise<void> | null {
    if (this.reading) this.again = true;
    else if (this.link.usable) {
      this.progressAt = Date.now();
      this.reading = this.load(this.value)
        .then(
          (v) => {
            this.value = v;
          },
          () => undefined, // the value read before stays; the next call tries again
        )
        .finally(() => {
          this.reading = null;
          if (this.again) {
            this.again = false;
            this.start();
          }
        });
    }
    return this.reading;
  }

  /** The value after a fresh read, or, when the read stalls or the server is unreachable, the kept one. */
  async get(): Promise<T> {
    const p = this.start();
    if (!p) return this.value;
    const cap = Date.now() + MAX_WAIT_MS;
    for (;;) {
      const wait = Math.min(this.progressAt + STALL_MS, cap) - Date.now();
      if (wait <= 0 || (await settlesWithin(p, wait))) return this.value;
    }
  }

  /** A read in flight made progress (a message arrived): its callers keep waiting. */
  protected progress(): void {
    this.progressAt = Date.now();
  }

  /** How long the read in flight has gone without progress (0: none in flight). */
  get stalledMs(): number {
    return this.reading ? Date.now() - this.progressAt : 0;
  }

  get busy(): boolean {
    return this.reading !== null;
  }
}

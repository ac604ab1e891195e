// One owner per role of a run: `train`, and each singleton actor (learner, orchestrator, checkpoint, evaluator).
// A lease is a key of the run's state KV (`lease.<role>`, LeaseSchema) holding who owns the role and when it
// last said so. It is taken and renewed only by compare-and-set on the revision the taker read (`create` for a
// key never written, `update(key, value, revision)` otherwise), so of two contenders that read the same
// revision exactly one write lands. It may be taken when it is free, when it has expired (renewedAt + ttlMs
// before now), or at once when its holder is a process of this host and pid namespace that no longer exists
// (a killed learner's restart need not sit out the TTL). leaseVerdict() is that rule, without NATS.
//
// Expiry compares the holder's clock (renewedAt) with the taker's: hosts are assumed to agree to well
// within a TTL (one host in the local mode, NTP in a cluster). A holder that cannot renew stops working
// before its lease can expire (HeldLease.keep with fence), so a standby that takes it over never works
// beside it.
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";
import type { KV } from "@nats-io/kv";
import { isInfrastructureError } from "./infrastructure-error.js";
import { LeaseSchema, type Lease, type LeaseRole, type StateKey } from "./state-keys.js";

export interface LeaseIdentity {
  host: string;
  pid: number;
  /** The actor instance ("learner-0") or "train". */
  instance: string;
  pidNs?: string;
}

export interface LeaseSettings {
  /** How long a lease lasts unless renewed. */
  ttlMs: number;
  /** How often its holder renews it (well under ttlMs). */
  renewMs: number;
}

export type LeaseVerdict = { take: true; why: "free" | "mine" | "expired" | "holder gone" } | { take: false; lease: Lease; expiresAt: number };

export function holderName(id: LeaseIdentity): string {
  return `${id.host}:${id.pid}:${id.instance}`;
}

/** This process as a lease holder. */
export function processIdentity(instance: string): LeaseIdentity {
  let pidNs: string | undefined;
  try {
    pidNs = readlinkSync("/proc/self/ns/pid");
  } catch {
    pidNs = undefined; // not Linux: a pid is never taken as proof of death
  }
  return { host: hostname(), pid: process.pid, instance, pidNs };
}

/** Whether `pid` is a live process here: a zombie (killed, not yet reaped) is not; an unknown state is. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2] !== "Z";
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== "ENOENT";
  }
}

/**
 * May `me` take the lease `current` (undefined: never taken, released, or unreadable) at `now`? Its own lease
 * yes; a live one of another holder no, however it got there; else yes. `alive` is asked only about a holder
 * of this host and pid namespace.
 */
export function leaseVerdict(current: Lease | undefined, me: LeaseIdentity, now: number, alive: (pid: number) => boolean = processAlive): LeaseVerdict {
  if (!current) return { take: true, why: "free" };
  if (current.holder === holderName(me)) return { take: true, why: "mine" };
  const expiresAt = Date.parse(current.renewedAt) + current.ttlMs;
  if (expiresAt < now) return { take: true, why: "expired" };
  const here = current.host === me.host && current.pidNs !== undefined && current.pidNs === me.pidNs;
  if (here && !alive(current.pid)) return { take: true, why: "holder gone" };
  return { take: false, lease: current, expiresAt };
}

/** "host:pid:instance (host h, pid p, since t)": who holds a lease, as a refusal or a standby says it. */
export function describeHolder(lease: Lease): string {
  return `${lease.holder} (host ${lease.host}, pid ${lease.pid}, since ${lease.since})`;
}

export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  constructor(
    role: LeaseRole,
    readonly holder: Lease | undefined,
  ) {
    super(holder ? `the ${role} lease is now held by ${describeHolder(holder)}` : `the ${role} lease was released by someone else`);
  }
}

function isWrongLastSequence(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return (e as Error).name === "JetStreamApiError" && (code === 10071 || code === 10164);
}

const leaseKey = (role: LeaseRole): StateKey => `lease.${role}`;
const iso = (t: number) => new Date(t).toISOString();

interface Read {
  lease: Lease | undefined;
  /** The key's last revision (a delete marker's too), 0 when it was never written. */
  revision: number;
}

export type LeaseTake =
  | { held: HeldLease; why: "free" | "mine" | "expired" | "holder gone"; previous: Lease | undefined }
  | { held: null; lease: Lease; expiresAt: number };

export interface LeaseClock {
  now?: () => number;
  alive?: (pid: number) => boolean;
}

/** The leases of one run, seen by one would-be holder. */
export class RunLeases {
  private readonly now: () => number;
  private readonly alive: (pid: number) => boolean;

  constructor(
    private readonly kv: KV,
    private readonly me: LeaseIdentity,
    private readonly settings: LeaseSettings,
    clock: LeaseClock = {},
  ) {
    this.now = clock.now ?? Date.now;
    this.alive = clock.alive ?? processAlive;
  }

  /** The role's lease as stored: a value that does not parse is nobody's (its revision still guards the next write). */
  async read(role: LeaseRole): Promise<Read> {
    const e = await this.kv.get(leaseKey(role));
    if (!e) return { lease: undefined, revision: 0 };
    if (e.operation !== "PUT" || e.value.length === 0) return { lease: undefined, revision: e.revision };
    let raw: unknown;
    try {
      raw = JSON.parse(new TextDecoder().decode(e.value));
    } catch {
      raw = undefined;
    }
    const r = LeaseSchema.safeParse(raw);
    return { lease: r.success ? r.data : undefined, revision: e.revision };
  }

  /** Takes the role's lease if leaseVerdict allows it and no one else's write lands first; else says who holds it. */
  async take(role: LeaseRole): Promise<LeaseTake> {
    for (let attempt = 0; ; attempt++) {
      const { lease, revision } = await this.read(role);
      const now = this.now();
      const v = leaseVerdict(lease, this.me, now, this.alive);
      if (!v.take) return { held: null, lease: v.lease, expiresAt: v.expiresAt };
      const value: Lease = {
        holder: holderName(this.me),
        host: this.me.host,
        pid: this.me.pid,
        ...(this.me.pidNs !== undefined ? { pidNs: this.me.pidNs } : {}),
        since: v.why === "mine" && lease ? lease.since : iso(now),
        renewedAt: iso(now),
        ttlMs: this.settings.ttlMs,
      };
      try {
        const json = JSON.stringify(value);
        const rev = revision > 0 ? await this.kv.update(leaseKey(role), json, revision) : await this.kv.create(leaseKey(role), json);
        return { held: new HeldLease(this.kv, role, value, rev, now, this.settings, this), why: v.why, previous: lease };
      } catch (e) {
        // Another write landed between our read and ours: read again, and most likely name its holder.
        if (!isWrongLastSequence(e) || attempt >= 3) throw e;
      }
    }
  }

  /**
   * Takes the role's lease, waiting while someone else holds it: `onStandby` hears of each new holder. Polls every
   * second (or renewMs if shorter); an unreachable server is waited out. Null when `signal` aborts first.
   */
  async standBy(role: LeaseRole, signal: AbortSignal, onStandby: (lease: Lease) => void): Promise<LeaseTake | null> {
    let last = "";
    while (!signal.aborted) {
      try {
        const t = await this.take(role);
        if (t.held) return t;
        if (t.lease.holder !== last) onStandby(t.lease);
        last = t.lease.holder;
      } catch (e) {
        if (!isInfrastructureError(e)) throw e;
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(1_000, this.settings.renewMs));
        signal.addEventListener("abort", wake, { once: true });
      });
    }
    return null;
  }

  /** Milliseconds since the epoch, as this instance tells time (a test's clock). */
  clock(): number {
    return this.now();
  }
}

export interface KeepOptions {
  /**
   * Stop (onLost) once the lease could expire before the next renewal, however the renewals failed: for a holder
   * whose work must never overlap another's. Without it only a renewal that finds another holder is a loss
   * (train: its actors hold leases of their own, and it rides out NATS outages).
   */
  fence: boolean;
}

/** A lease this process holds: renewed by keep(), given back by release(). */
export class HeldLease {
  private timer: NodeJS.Timeout | null = null;
  private renewing: Promise<void> | null = null;
  private done = false;

  constructor(
    private readonly kv: KV,
    readonly role: LeaseRole,
    private value: Lease,
    private revision: number,
    /** When the stored renewedAt was taken on this process's clock. */
    private renewedAt: number,
    private readonly settings: LeaseSettings,
    private readonly leases: RunLeases,
  ) {}

  get lease(): Lease {
    return this.value;
  }

  /** Writes a new renewedAt over the revision this holder last wrote; LeaseLostError when someone else's write is there. */
  async renew(): Promise<void> {
    const now = this.leases.clock();
    const next = { ...this.value, renewedAt: iso(now) };
    try {
      this.revision = await this.kv.update(leaseKey(this.role), JSON.stringify(next), this.revision, this.settings.renewMs);
      this.value = next;
      this.renewedAt = now;
    } catch (e) {
      if (!isWrongLastSequence(e)) throw e;
      // Our own earlier write may have landed after its reply timed out: then the lease is still ours.
      const cur = await this.leases.read(this.role);
      if (cur.lease?.holder !== this.value.holder) throw new LeaseLostError(this.role, cur.lease);
      this.revision = cur.revision;
      this.value = cur.lease;
      this.renewedAt = Date.parse(cur.lease.renewedAt); // written on this process's clock
    }
  }

  /** Renews every renewMs until release() or a loss, which onLost hears of once (the renewals stop). */
  keep(onLost: (why: string) => void, o: KeepOptions): void {
    const { ttlMs, renewMs } = this.settings;
    const lose = (why: string) => {
      if (this.done) return;
      this.stop();
      onLost(why);
    };
    const tick = () => {
      if (this.done) return;
      const now = this.leases.clock();
      // Checked before anything else runs: a process stopped or starved past this point may have been replaced.
      if (o.fence && now + renewMs >= this.renewedAt + ttlMs)
        return lose(`the ${this.role} lease was last renewed ${now - this.renewedAt} ms ago (ttl ${ttlMs} ms): it may be another's by now`);
      if (this.renewing) return;
      this.renewing = this.renew()
        .catch((e: Error) => {
          if (e instanceof LeaseLostError) lose(e.message);
        })
        .finally(() => (this.renewing = null));
    };
    this.timer = setInterval(tick, renewMs);
    this.timer.unref();
  }

  /** Stops renewing and deletes the key, only if it is still this holder's revision. */
  async release(): Promise<void> {
    if (this.done) return;
    this.stop();
    await this.renewing;
    await this.kv.delete(leaseKey(this.role), { previousSeq: this.revision }).catch(() => undefined);
  }

  private stop(): void {
    this.done = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

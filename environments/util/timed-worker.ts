import { parentPort, Worker } from "node:worker_threads";
import { TimeLimitError } from "./time-limit.js";

/**
 * Runs synchronous CPU work (e.g. a CAS check on untrusted text) in a worker thread with a time limit
 * per job. A job past its limit terminates the worker (the only way to stop synchronous JS) and a fresh
 * one starts for the next job. Jobs run one at a time, and a job's clock starts when it is dispatched,
 * not while it waits in the queue or the worker starts up.
 */
export class TimedWorker<Req, Res> {
  private worker: Worker | null = null;
  private ready: Promise<Worker> | null = null;
  private readonly queue: Array<{ req: Req; timeoutMs: number; resolve: (r: Res) => void; reject: (e: Error) => void }> = [];
  private busy = false;
  private closed = false;
  private nextId = 0;

  constructor(
    private readonly url: URL,
    private readonly opts: { name: string; startupTimeoutMs?: number },
  ) {}

  run(req: Req, timeoutMs: number): Promise<Res> {
    if (this.closed) return Promise.reject(new Error(`${this.opts.name}: worker is closed`));
    return new Promise<Res>((resolve, reject) => {
      this.queue.push({ req, timeoutMs, resolve, reject });
      void this.pump();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new Error(`${this.opts.name}: worker closed`));
    const w = this.worker;
    this.worker = null;
    this.ready = null;
    if (w) await w.terminate();
  }

  private start(): Promise<Worker> {
    if (this.ready) return this.ready;
    const w = new Worker(this.url);
    w.unref(); // an idle checker never keeps the process alive
    this.worker = w;
    this.ready = new Promise<Worker>((resolve, reject) => {
      const timer = setTimeout(() => {
        void w.terminate();
        reject(new Error(`${this.opts.name}: worker did not start within ${this.opts.startupTimeoutMs ?? 30_000} ms`));
      }, this.opts.startupTimeoutMs ?? 30_000);
      const onMsg = (m: unknown) => {
        if (m && typeof m === "object" && (m as { ready?: boolean }).ready) {
          clearTimeout(timer);
          w.off("message", onMsg);
          resolve(w);
        }
      };
      w.on("message", onMsg);
      w.once("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      w.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`${this.opts.name}: worker exited with code ${code} during startup`));
        if (this.worker === w) {
          this.worker = null;
          this.ready = null;
        }
      });
    });
    this.ready.catch(() => {
      if (this.worker === w) {
        this.worker = null;
        this.ready = null;
      }
    });
    return this.ready;
  }

  private async pump(): Promise<void> {
    if (this.busy) return;
    const job = this.queue.shift();
    if (!job) return;
    this.busy = true;
    try {
      job.resolve(await this.dispatch(job.req, job.timeoutMs));
    } catch (err) {
      job.reject(err instanceof Error ? err : new Error(String(err)));
    } finally {
      this.busy = false;
      void this.pump();
    }
  }

  private async dispatch(req: Req, timeoutMs: number): Promise<Res> {
    const w = await this.start();
    const id = this.nextId++;
    return new Promise<Res>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        w.off("message", onMsg);
        w.off("exit", onExit);
      };
      const timer = setTimeout(() => {
        done();
        // The worker is stuck in synchronous code: kill it; the next job starts a fresh one.
        if (this.worker === w) {
          this.worker = null;
          this.ready = null;
        }
        void w.terminate();
        reject(new TimeLimitError(this.opts.name, timeoutMs));
      }, timeoutMs);
      const onMsg = (m: { id?: number; ok?: boolean; value?: Res; error?: string }) => {
        if (m?.id !== id) return;
        done();
        if (m.ok) resolve(m.value as Res);
        else reject(new Error(m.error ?? "worker job failed"));
      };
      const onExit = (code: number) => {
        done();
        if (this.worker === w) {
          this.worker = null;
          this.ready = null;
        }
        reject(new Error(`${this.opts.name}: worker exited with code ${code}`));
      };
      w.on("message", onMsg);
      w.once("exit", onExit);
      w.postMessage({ id, req });
    });
  }
}

/** The worker side: answer each job with handler's result (or its error), after announcing readiness. */
export function serveWorker<Req, Res>(handler: (req: Req) => Res): void {
  const port = parentPort;
  if (!port) throw new Error("serveWorker must run inside a worker thread");
  port.on("message", (m: { id: number; req: Req }) => {
    try {
      port.postMessage({ id: m.id, ok: true, value: handler(m.req) });
    } catch (err) {
      port.postMessage({ id: m.id, ok: false, error: err instanceof Error ? err.message : String(err) });
    }
  });
  port.postMessage({ ready: true });
}

// `rollstream bench <name>`: each benchmark prints a ratio against a baseline measured in the same run,
// and its last line is one JSON object of the figures.
import type { Command } from "commander";

type BenchFn = (opts: Record<string, unknown>) => Promise<Record<string, number>>;

const BENCHES: Record<string, { what: string; load: () => Promise<BenchFn> }> = {
  kernels: {
    what: "sgemm: ours, OpenBLAS and the measured dispatch per shape; train and decode tokens/s on the demo shapes",
    load: async () => (await import("../../bench/kernels.js")).runKernelsBench as BenchFn,
  },
  learner: {
    what: "learner steps on groups of 8 with group-prefix packing vs every sample whole: tokens/s and effective (loss) tokens/s at prompt:completion 1:1, 4:1, 1:4; step time as 1 rank x 1 thread, 1 rank x 2 threads and 2 MPI ranks x 1 thread, and a model of N ranks",
    load: async () => (await import("../../bench/learner.js")).runLearnerBench as BenchFn,
  },
  transport: {
    what: "rollout batches through JetStream vs a raw loopback TCP copy",
    load: async () => (await import("../../bench/transport.js")).runTransportBench as BenchFn,
  },
  sandbox: {
    what: "sandbox warm-exec latency and throughput vs a bare python3 subprocess",
    load: async () => (await import("../../bench/sandbox.js")).runSandboxBench as BenchFn,
  },
  dashboard: {
    what: "the dashboard's first page over 10,000 scored rows vs one ordered consumer reading their headers",
    load: async () => (await import("../../bench/dashboard.js")).runDashboardBench as BenchFn,
  },
  algos: {
    what: "held-out pass@1 of the demo under each recipe (filters, losses, advantages) for the same RL wall time, 3 seeds, vs the default",
    load: async () => (await import("../../bench/algos.js")).runAlgosBench as unknown as BenchFn,
  },
  inference: {
    what: "the inference engine (continuous batching, shared prefixes, KV reuse) vs static batches on a tool/multi-turn-shaped workload; prefill saved; the wait for new weights mid-generation; the demo's RL step with backend rollstream (one serve process) vs local, and one weight update per server",
    load: async () => (await import("../../bench/inference.js")).runInferenceBench as BenchFn,
  },
  lora: {
    what: "one RL step with LoRA rank 8 on every projection vs full fine-tuning of the same model (demo and ~21 M shapes), and the optimizer state each keeps",
    load: async () => (await import("../../bench/lora.js")).runLoraBench as BenchFn,
  },
  loop: {
    what: "seconds per RL step with maxAsyncLevel 2 vs 0 on the demo config",
    load: async () => (await import("../../bench/loop.js")).runLoopBench as BenchFn,
  },
};

export function registerBenchCommand(program: Command): void {
  program
    .command("bench <name>")
    .description(
      `benchmarks: ${Object.entries(BENCHES)
        .map(([k, v]) => `${k} (${v.what})`)
        .join("; ")}`,
    )
    .option("--threads <n>", "kernel threads")
    .option("--quick", "smaller sizes, for a smoke run")
    .action(async (name: string, opts: { threads?: string; quick?: boolean }) => {
      const b = BENCHES[name];
      if (!b) {
        process.stderr.write(`unknown benchmark ${name}; choose one of ${Object.keys(BENCHES).join(", ")}\n`);
        process.exitCode = 2;
        return;
      }
      const fn = await b.load();
      await fn({ threads: opts.threads ? Number(opts.threads) : undefined, quick: opts.quick === true });
    });
}

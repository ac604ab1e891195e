// How a learner process finds its place among actors.learner.ranks (kernels/rank-group.ts has the group itself):
// - ranks: 1, or no MPI job around it: the learner as ever (rank 0 of 1).
// - ranks: N > 1 and not yet inside an MPI job: `rollstream actor learner` becomes the group's launcher. It runs
//   `mpirun -np N` of itself and exits with mpirun's status, so `train`, k8s and Slurm start a learner group
//   exactly as they start one learner, and restart it the same way: a rank that dies ends the job (mpirun kills
//   the others), the launcher sees the learner exit non-zero and starts the whole group again, which restores the
//   last checkpoint and trains the same rows (rank 0 reads and records them as the one learner did).
// - inside the job: rank 0 runs the learner actor (lease, NATS, the stream, publishing, checkpoints); every other
//   rank only follows rank 0's plans over MPI and needs no NATS connection at all.
import { spawn } from "node:child_process";
import { killWithParent } from "../../deploy/local/child-reaper.js";
import { RankGroup } from "../../kernels/rank-group.js";
import { nativeComm } from "../../kernels/native.js";
import type { RunConfig } from "./config.js";
import { createLogger } from "./logger.js";
import { createPolicyModel } from "./model-factory.js";

/** This process's place in an MPI job (Open MPI's mpirun, PMI / Slurm srun), or null outside one. */
export function mpiJobPlace(env: NodeJS.ProcessEnv = process.env): { rank: number; size: number } | null {
  const size = env.OMPI_COMM_WORLD_SIZE ?? env.PMI_SIZE ?? (env.PMIX_RANK !== undefined ? env.SLURM_NTASKS : undefined);
  const rank = env.OMPI_COMM_WORLD_RANK ?? env.PMI_RANK ?? env.PMIX_RANK;
  if (size === undefined || rank === undefined) return null;
  return { rank: Number(rank), size: Number(size) };
}

/**
 * mpirun's arguments for N local ranks: the ranks share the machine with the run's other actors, so they are not
 * bound to cores (OpenMP threads would fight over one) and may outnumber cores; shared memory within the node
 * and TCP, loopback included, between nodes. RS_MPIRUN_ARGS adds to them (e.g. a hostfile on a cluster).
 */
export function mpirunArgs(ranks: number, argv: string[], env: NodeJS.ProcessEnv = process.env): string[] {
  const args = ["-np", String(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader,tcp"];
  // Containers (CI, k8s) often run as root; mpirun refuses that unless told.
  if (process.getuid?.() === 0) args.unshift("--allow-run-as-root");
  if (env.RS_MPIRUN_ARGS) args.push(...env.RS_MPIRUN_ARGS.split(/\s+/).filter(Boolean));
  return [...args, ...argv];
}

/** Runs `mpirun -np ranks` of this very command (node + its argv) and resolves with its exit code. */
export function launchRanks(config: RunConfig): Promise<number> {
  const ranks = config.actors.learner.ranks;
  const log = createLogger({ run: config.run, actor: "learner", instance: "launcher" });
  const args = mpirunArgs(ranks, [process.execPath, ...process.execArgv, ...process.argv.slice(1)]);
  log.info({ ranks, mpirun: args.join(" ") }, "starting the learner's ranks");
  // The children's rsh agent is never needed on one node; an empty one keeps mpirun from looking for ssh.
  const child = killWithParent(
    spawn("mpirun", args, { stdio: "inherit", env: { ...process.env, OMPI_MCA_plm_rsh_agent: process.env.OMPI_MCA_plm_rsh_agent ?? "" } }),
  );
  // mpirun forwards SIGTERM/SIGINT to every rank: rank 0 drains and tells the others to stop.
  const forward = (sig: NodeJS.Signals) => () => child.kill(sig);
  process.on("SIGTERM", forward("SIGTERM"));
  process.on("SIGINT", forward("SIGINT"));
  return new Promise((resolve) => {
    child.once("error", (e) => {
      log.error({ err: e.message }, "mpirun could not start: install openmpi-bin (actors.learner.ranks > 1 needs it)");
      resolve(1);
    });
    child.once("exit", (code, signal) => {
      if (code !== 0) log.error({ code, signal }, "the learner's ranks ended with an error (a rank died or failed): the group stops as one");
      resolve(code ?? 1);
    });
  });
}

/** Rank 1..N-1: the model as rank 0 has it, then rank 0's plans until it stops; the exit code. */
export async function followRankZero(config: RunConfig, rank: number, size: number): Promise<number> {
  const log = createLogger({ run: config.run, actor: "learner", instance: `rank${rank}` });
  // Rank 0 drains on a signal and tells this rank to stop; mpirun ends it if rank 0 is gone.
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => log.info({ sig }, "signal: waiting for rank 0's stop"));
  const comm = nativeComm();
  const place = comm.init();
  if (place.rank !== rank || place.size !== size) throw new Error(`MPI says rank ${place.rank} of ${place.size}, the environment ${rank} of ${size}`);
  const model = createPolicyModel(config, { threads: config.model.threads });
  log.info({ rank, size, params: model.numParams }, "learner rank following rank 0"); // pino adds the pid (the tests kill by it)
  await new RankGroup(model, comm, rank, size).follow((msg, fields) => log.info(fields ?? {}, msg));
  model.dispose();
  log.info("rank 0 stopped the group");
  return 0;
}

/**
 * `rollstream actor learner`: the exit code when this process is the ranks' launcher or a follower rank (it has then
 * done its part), null when it runs the learner actor itself (one rank, or rank 0).
 */
export async function runLearnerRankRole(config: RunConfig): Promise<number | null> {
  const place = mpiJobPlace();
  if (config.actors.learner.ranks > 1 && !nativeComm().available)
    throw new Error(
      `actors.learner.ranks is ${config.actors.learner.ranks} but the kernels addon was built without MPI: install openmpi-bin and libopenmpi-dev, rebuild the kernels (npm rebuild), or set ranks: 1`,
    );
  if (!place) return config.actors.learner.ranks > 1 ? launchRanks(config) : null;
  if (place.size !== config.actors.learner.ranks)
    throw new Error(
      `this MPI job has ${place.size} ranks but actors.learner.ranks is ${config.actors.learner.ranks}: start it with mpirun -np ${config.actors.learner.ranks}`,
    );
  pinDevice(config);
  if (place.rank > 0) return followRankZero(config, place.rank, place.size);
  // Rank 0 joins the communicator before anything else (its lease may keep it standing by for long): the others
  // then wait for its first plan sleeping between polls, not inside MPI_Init's busy fence.
  nativeComm().init();
  return null;
}

/**
 * model.device cuda or auto: one GPU per rank on a node, the rank's local index (unless CUDA_VISIBLE_DEVICES already
 * says), so every rank's model and NCCL communicator use its device 0 (kernels/rank-collectives.ts). A rank whose
 * index has no GPU fails to create its model (cuda) or runs on the CPU (auto), and the group refuses to mix them.
 */
function pinDevice(config: RunConfig, env: NodeJS.ProcessEnv = process.env): void {
  const local = env.OMPI_COMM_WORLD_LOCAL_RANK ?? env.MPI_LOCALRANKID ?? env.SLURM_LOCALID;
  if (config.model.device !== "cpu" && local !== undefined && env.CUDA_VISIBLE_DEVICES === undefined) env.CUDA_VISIBLE_DEVICES = local;
}

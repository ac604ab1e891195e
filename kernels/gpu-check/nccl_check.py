"""The learner ranks' NCCL path on the CUDA backend (kernels/cuda/nccl.cu): libnccl loaded with dlopen, a
communicator from rank 0's 128-byte unique id, then reduce-scatter (f32), all-gather (f32) and all-reduce (f64) on
device buffers checked against exact values (rs_nccl_selftest: small integers, so any summation order is exact).
One rank on GPU 0 always; two ranks (two processes, GPUs 0 and 1, the id handed over a pipe as rank 0 would hand it
out) when the machine has two GPUs. NCCL comes from $RS_NCCL_LIB (read here, handed to rs_nccl_set_lib), torch's
nvidia-nccl wheel, or the loader path.

  python3 kernels/gpu-check/nccl_check.py kernels/build/Release/librollstream_cuda.so
"""
import ctypes as C
import glob
import multiprocessing as mp
import os
import sys

sys.dont_write_bytecode = True


def find_nccl():
    if os.environ.get("RS_NCCL_LIB"):
        return os.environ["RS_NCCL_LIB"]
    for d in sys.path:
        hits = glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*"))
        if hits:
            return hits[0]
    return None


def load(path):
    lib = C.CDLL(os.path.abspath(path))
    lib.rs_nccl_set_lib.argtypes = [C.c_char_p]
    nccl_lib = find_nccl()
    if nccl_lib:
        lib.rs_nccl_set_lib(nccl_lib.encode())
    lib.rs_nccl_available.restype = C.c_int32
    lib.rs_nccl_describe.restype = C.c_char_p
    lib.rs_nccl_last_error.restype = C.c_char_p
    lib.rs_nccl_unique_id.argtypes = [C.c_char_p]
    lib.rs_nccl_init.argtypes = [C.POINTER(C.c_void_p), C.c_int32, C.c_char_p, C.c_int32, C.c_int32]
    lib.rs_nccl_selftest.argtypes = [C.c_void_p, C.c_int32, C.c_int32, C.c_uint64, C.POINTER(C.c_double)]
    lib.rs_nccl_destroy.argtypes = [C.c_void_p]
    return lib


def check(lib, rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {lib.rs_nccl_last_error().decode()}")


TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=32,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=0, attention_bias=0, threads=1)


def zero1_model_check(lib, comm, nranks, rank):
    """The learner's ZeRO-1 step over NCCL on a model's device buffers (rs_nccl_model_*, rs_model_shard_*): every rank
    trains the same micro-batch, so the summed gradient is nranks * g; one reference model steps on nranks * g with
    its whole optimizer. No clipping, so the two must agree bit for bit. Returns the largest parameter difference."""
    import numpy as np
    import torch
    import rsabi

    lib.rs_nccl_model_reduce_scatter_grads.argtypes = [C.c_void_p, C.c_void_p, C.POINTER(C.c_int64), C.c_int32, C.c_int32,
                                                       C.POINTER(C.c_double)]
    lib.rs_nccl_model_all_gather_params.argtypes = [C.c_void_p, C.c_void_p, C.POINTER(C.c_int64), C.c_int32]
    lib.rs_nccl_all_reduce_sum_f64.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.c_void_p]
    ref, mine = rsabi.Model(lib, TINY, seed=3), rsabi.Model(lib, TINY, seed=3)
    tokens = np.arange(1, 25, dtype=np.int32) % TINY["vocab_size"]
    mask = np.ones(tokens.size, dtype=np.uint8)
    mask[0] = 0
    spec = rsabi.loss_spec(rsabi.LOSS_SFT, float(mask.sum()))
    n = mine.n
    counts = (C.c_int64 * nranks)(*[n // nranks + (1 if r < n % nranks else 0) for r in range(nranks)])
    offset = sum(counts[r] for r in range(rank))
    mine.shard_optimizer(offset, counts[rank])
    for step in range(3):
        for m in (ref, mine):
            m.train_micro(tokens, [0], mask, spec)
        ref.write(rsabi.GRADS, ref.read(rsabi.GRADS) * nranks)
        ref.step(lr=1e-2)
        sumsq = C.c_double(0)
        check(lib, lib.rs_nccl_model_reduce_scatter_grads(comm, mine.h, counts, nranks, rank, C.byref(sumsq)), "model reduce-scatter")
        total = torch.tensor([sumsq.value], dtype=torch.float64, device="cuda")
        check(lib, lib.rs_nccl_all_reduce_sum_f64(comm, C.c_void_p(total.data_ptr()), 1, None), "all-reduce")
        torch.cuda.synchronize()
        mine.shard_step(float(total.item()) ** 0.5, lr=1e-2)
        check(lib, lib.rs_nccl_model_all_gather_params(comm, mine.h, counts, nranks), "model all-gather")
    return float(np.abs(ref.read(rsabi.PARAMS) - mine.read(rsabi.PARAMS)).max())


def rank_main(path, nranks, rank, uid, per_rank, out):
    lib = load(path)
    comm = C.c_void_p()
    check(lib, lib.rs_nccl_init(C.byref(comm), nranks, uid, rank, rank), f"rank {rank} init")
    err = C.c_double(-1)
    check(lib, lib.rs_nccl_selftest(comm, nranks, rank, per_rank, C.byref(err)), f"rank {rank} selftest")
    model_err = zero1_model_check(lib, comm, nranks, rank)
    check(lib, lib.rs_nccl_destroy(comm), f"rank {rank} destroy")
    out.put((rank, max(err.value, model_err)))


def gpu_count():
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        cudart = C.CDLL("libcudart.so")
        n = C.c_int(0)
        cudart.cudaGetDeviceCount(C.byref(n))
        return n.value


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "kernels/build/Release/librollstream_cuda.so"
    lib = load(path)
    print("nccl:", lib.rs_nccl_describe().decode())
    if not lib.rs_nccl_available():
        print("FAIL: NCCL did not load")
        return 1
    status = 0
    per_rank = 1 << 20
    for nranks in (1, 2):
        if nranks > gpu_count():
            print(f"{nranks} ranks: skipped (this machine has {gpu_count()} GPU)")
            continue
        uid = C.create_string_buffer(128)
        check(lib, lib.rs_nccl_unique_id(uid), "unique id")  # rank 0 makes it, every rank gets its 128 bytes
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(path, nranks, r, uid.raw, per_rank, out)) for r in range(nranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        results = dict(out.get(timeout=5) for _ in procs if not out.empty())
        ok = len(results) == nranks and all(e == 0 for e in results.values()) and all(p.exitcode == 0 for p in procs)
        print(f"{nranks} rank(s), {per_rank} floats per rank: reduce-scatter + all-gather + all-reduce, and 3 ZeRO-1 model steps against one"
              f" whole-optimizer model: max error {results} -> {'ok' if ok else 'FAIL'}")
        status |= 0 if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Runs WITHOUT a GPU: librollstream_cuda.so must load, report 0 devices, and answer every call that needs the
device with a status code and a clear message (never a crash); argument validation still runs first. Also
drives the rsabi.Model wrapper (the one check.py and bench.py use) end to end on the CPU library.

  python3 kernels/gpu-check/test_no_device.py [kernels/build/Release]"""
import ctypes as C
import json
import math
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, here)
import rsabi  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "Release")
RS_ERR_INVALID_ARGUMENT, RS_ERR_UNSUPPORTED = 1, 3
failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def err_call(fn, *args):
    e = rsabi.Error()
    st = fn(*args, C.byref(e))
    return st, e.message.decode(errors="replace")


def cuda_without_device(path):
    lib = rsabi.load(path)
    expect(lib.rs_device_count() == 0, "rs_device_count() == 0 without a GPU")
    info = json.loads(rsabi.info(lib))
    expect(info["device"] == "cuda" and info["abi"] == rsabi.ABI_VERSION, f"rs_backend_info is JSON naming the cuda device: {info}")
    cfg = rsabi.ModelConfig(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=16, intermediate_size=24, num_layers=2,
                            num_heads=4, num_kv_heads=2, max_position_embeddings=32, tie_word_embeddings=1, attention_bias=1, threads=1)
    e = rsabi.Error()
    m = lib.rs_model_create(C.byref(cfg), 1, C.byref(e))
    msg = e.message.decode()
    expect(m is None and e.code == RS_ERR_UNSUPPORTED and "no CUDA device" in msg, f"rs_model_create -> NULL, UNSUPPORTED: {msg!r}")
    bad = rsabi.ModelConfig(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=18, intermediate_size=24, num_layers=2,
                            num_heads=4, num_kv_heads=2, max_position_embeddings=32, tie_word_embeddings=1, attention_bias=0, threads=1)
    m = lib.rs_model_create(C.byref(bad), 1, C.byref(e))
    expect(m is None and e.code == RS_ERR_INVALID_ARGUMENT and b"not divisible by numHeads" in e.message,
           f"config validation runs before the device check: {e.message.decode()!r}")

    # Mixture-of-experts configs (qwen3_moe softmax routing; glm4_moe sigmoid routing, groups, shared expert) are no
    # longer refused by the CUDA backend: without a device they fail on the device, after the MoE config checks.
    flags = (C.c_uint8 * 2)(0, 1)
    for name, extra in (("qwen3_moe", dict(norm_topk_prob=1, router_aux_loss_coef=0.01)),
                        ("glm4_moe", dict(moe_router=1, n_group=2, topk_group=1, routed_scaling_factor=2.5, n_shared_experts=1, norm_topk_prob=1,
                                          qk_norm=1, head_dim=8, rotary_dim=4))):
        moe = rsabi.ModelConfig(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=16, intermediate_size=24, num_layers=2,
                                num_heads=4, num_kv_heads=2, max_position_embeddings=32, threads=1, num_experts=8, num_experts_per_tok=2,
                                moe_intermediate_size=8, moe_layers=flags, **extra)
        m = lib.rs_model_create(C.byref(moe), 1, C.byref(e))
        msg = e.message.decode()
        expect(m is None and e.code == RS_ERR_UNSUPPORTED and "no CUDA device" in msg and "experts" not in msg,
               f"{name}: the CUDA backend takes MoE configs (no device here): {msg!r}")
        moe.num_experts_per_tok = 9
        m = lib.rs_model_create(C.byref(moe), 1, C.byref(e))
        expect(m is None and e.code == RS_ERR_INVALID_ARGUMENT and b"numExpertsPerTok" in e.message,
               f"{name}: the MoE config checks run before the device check: {e.message.decode()!r}")

    x = rsabi.f32(np.ones((3, 8)))
    w = rsabi.f32(np.ones(8))
    y = np.zeros((3, 8), np.float32)
    rstd = np.zeros(3, np.float32)
    st, msg = err_call(lib.rs_rmsnorm_fwd, rsabi.ptr(x, rsabi.F32P), rsabi.ptr(w, rsabi.F32P), 3, 8, 1e-5, rsabi.ptr(y, rsabi.F32P),
                       rsabi.ptr(rstd, rsabi.F32P))
    expect(st == RS_ERR_UNSUPPORTED and msg.startswith("rmsnorm_fwd:") and "no CUDA device" in msg, f"rs_rmsnorm_fwd: {msg!r}")
    st, msg = err_call(lib.rs_rmsnorm_fwd, rsabi.ptr(x, rsabi.F32P), rsabi.ptr(w, rsabi.F32P), 0, 8, 1e-5, rsabi.ptr(y, rsabi.F32P),
                       rsabi.ptr(rstd, rsabi.F32P))
    expect(st == RS_ERR_INVALID_ARGUMENT and "sizes must be positive" in msg, f"validation first: {msg!r}")
    a = rsabi.f32(np.ones((4, 4)))
    c = np.zeros((4, 4), np.float32)
    for impl in (0, 1):
        st, msg = err_call(lib.rs_sgemm, 0, 0, 4, 4, 4, 1.0, rsabi.ptr(a, rsabi.F32P), 4, rsabi.ptr(a, rsabi.F32P), 4, 0.0,
                           rsabi.ptr(c, rsabi.F32P), 4, impl)
        expect(st == RS_ERR_UNSUPPORTED and "no CUDA device" in msg, f"rs_sgemm impl {impl}: {msg!r}")
    seg = rsabi.i32([0])
    q = rsabi.f32(np.ones((2, 2, 4)))
    kv = rsabi.f32(np.ones((2, 1, 4)))
    o = np.zeros((2, 2, 4), np.float32)
    lse = np.zeros((2, 2), np.float32)
    st, msg = err_call(lib.rs_attention_fwd, rsabi.ptr(q, rsabi.F32P), rsabi.ptr(kv, rsabi.F32P), rsabi.ptr(kv, rsabi.F32P), 2, 2, 1, 4,
                       rsabi.ptr(seg, rsabi.I32P), 1, rsabi.ptr(o, rsabi.F32P), rsabi.ptr(lse, rsabi.F32P))
    expect(st == RS_ERR_UNSUPPORTED and msg.startswith("attention_fwd:"), f"rs_attention_fwd: {msg!r}")
    z = rsabi.f32(np.zeros((2, 5)))
    tg = rsabi.i32([1, 2])
    mk = np.ones(2, np.uint8)
    stats = rsabi.LossStats()
    spec = rsabi.loss_spec(rsabi.LOSS_SFT, 2.0)
    st, msg = err_call(lib.rs_loss_fwd_bwd, rsabi.ptr(z, rsabi.F32P), 2, 5, rsabi.ptr(tg, rsabi.I32P), rsabi.ptr(mk, rsabi.U8P), None,
                       None, C.byref(spec), None, None, C.byref(stats))
    expect(st == RS_ERR_UNSUPPORTED and msg.startswith("loss:"), f"rs_loss_fwd_bwd: {msg!r}")
    out = C.c_double()
    st, msg = err_call(lib.rs_grad_norm, rsabi.ptr(w, rsabi.F32P), 8, C.byref(out))
    expect(st == RS_ERR_UNSUPPORTED, f"rs_grad_norm: {msg!r}")
    lib.rs_set_num_threads(2)
    # Settings round-trip through the ABI (the CPU fields are kept, and ignored), and take effect.
    rsabi.configure(lib, cuda_matmul="tf32", cuda_sync=1, blas_routes="nt:64x64x512:1t=blas", simd_level=1)
    got = rsabi.settings(lib)
    expect(got["cuda_matmul"] == 2 and got["cuda_sync"] == 1 and got["blas_routes"] == "nt:64x64x512:1t=blas" and got["simd_level"] == 1,
           f"rs_get_settings returns what rs_set_settings stored: {got}")
    expect(json.loads(rsabi.info(lib))["matmul"] == "tf32", "the cuda_matmul setting is the mode a model created now runs")
    st, msg = err_call(lib.rs_set_settings, C.byref(rsabi.Settings(cuda_matmul=7)))
    expect(st == RS_ERR_INVALID_ARGUMENT and "cuda_matmul" in msg and rsabi.settings(lib)["cuda_matmul"] == 2,
           f"a bad field is refused, naming it, and nothing changes: {msg!r}")
    try:  # rs_backend_info above tried to load cuBLAS: the file it looks for is fixed from then on
        rsabi.configure(lib, cublas_lib="/nonexistent/libcublas.so.12")
        expect(False, "cublas_lib is refused after cuBLAS's first use")
    except rsabi.KernelError as e:
        expect("cublas_lib cannot change after cuBLAS's first use" in e.message, f"cublas_lib refused after first use: {e.message!r}")
    rsabi.configure(lib, blas_mode=rsabi.BLAS_OFF, cuda_matmul=None, cuda_sync=0)
    expect(json.loads(rsabi.info(lib))["blas"].startswith("none"), "blas_mode off disables cuBLAS")
    st, msg = err_call(lib.rs_set_test_hooks, C.byref(rsabi.TestHooks(slowdown_own=3)))
    expect(st == 0, f"the CUDA backend accepts (and ignores) the test hooks: {msg!r}")
    expect(not lib.rs_model_params(None) and lib.rs_model_num_params(None) == 0, "null-model getters return NULL / 0")
    ee = rsabi.Error()
    eng = lib.rs_engine_create(None, C.byref(rsabi.EngineConfig(16, 8, 4, 0, 0)), C.byref(ee))
    expect(eng is None and ee.code == RS_ERR_INVALID_ARGUMENT and b"null model" in ee.message, f"rs_engine_create(NULL) refused: {ee.message!r}")
    lib.rs_engine_free(None)
    lib.rs_model_free(None)
    lib.rs_model_zero_grad(None)


def cpu_wrappers(path):
    lib = rsabi.load(path)
    cfg = dict(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=16, intermediate_size=24, num_layers=2, num_heads=4,
               num_kv_heads=2, max_position_embeddings=64, tie_word_embeddings=0, attention_bias=1, threads=1)
    m = rsabi.Model(lib, cfg, seed=3)
    ts = m.tensors()
    expect(ts[0]["name"] == "model.embed_tokens.weight" and ts[-1]["name"] == "lm_head.weight" and sum(t["size"] for t in ts) == m.n,
           "tensor table covers the flat buffer")
    st = m.state()
    st["model.norm.weight"][:] = 2.0
    m.load_state(st)
    expect(np.all(m.state()["model.norm.weight"] == 2.0), "load_state / state round trip")
    tokens, segs = [1, 2, 3, 4, 5, 6], [0, 3]
    logits = m.forward(tokens, segs)
    expect(logits.shape == (6, 37) and np.isfinite(logits).all(), "forward")
    mask = [0, 1, 1, 0, 1, 1]
    stats, lp = m.train_micro(tokens, segs, mask, rsabi.loss_spec(rsabi.LOSS_SFT, 4.0))
    ref = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    want = [ref[t - 1, tokens[t]] for t in range(6) if mask[t]]
    expect(stats["loss_tokens"] == 4 and np.allclose(lp[np.array(mask, bool)], want, atol=1e-5), "train_micro token logprobs")
    g = m.read(rsabi.GRADS)
    expect(np.abs(g).sum() > 0, "grads accumulated")
    r = m.step(lr=1e-2, max_grad_norm=1e-3)
    expect(r["step"] == 1 and r["clipped"] == 1 and abs(r["grad_norm"] - math.sqrt((g.astype(np.float64) ** 2).sum())) < 1e-6 * r["grad_norm"],
           f"step {r}")
    expect(np.abs(m.read(rsabi.GRADS)).sum() == 0, "step zeroes grads")
    out = m.generate([[1, 2, 3], [4, 5]], 5, temperature=1.0, seed=7, return_logits=True)
    expect(list(out["lengths"]) == [5, 5] and all(len(t) == 5 for t in out["tokens"]), "generate lengths")
    sl = out["step_logits"][0][0]
    want_plp = sl[out["tokens"][0][0]] - np.log(np.exp(sl.astype(np.float64)).sum())
    expect(abs(out["policy_logprobs"][0][0] - want_plp) < 1e-5, "generate policy logprob = log_softmax of step logits")
    m.free()


def exported(path):
    """The rs_* functions a library exports (nm -D), or None without binutils."""
    import shutil
    import subprocess
    if not shutil.which("nm"):
        return None
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1] for ln in out.splitlines() if ln.split() and ln.split()[-1].startswith("rs_")}


def exports_match(cuda_path, cpu_path):
    got, want = exported(cuda_path), exported(cpu_path)
    if got is None:
        print("skip: nm not found (symbol sets)")
        return
    got = {s for s in got if not s.startswith("rs_nccl_")}  # the learner ranks' NCCL calls exist on CUDA only
    expect(got == want, f"the CUDA library exports the CPU library's {len(want)} rs_* symbols (missing {sorted(want - got)}, extra {sorted(got - want)})")


def nccl_without_device(path):
    """The learner ranks' NCCL entry points (kernels/cuda/nccl.cu): libnccl is dlopen()ed, never linked, so the
    library loads without it; without it every call fails with the reason instead of crashing."""
    lib = C.CDLL(os.path.abspath(path))
    lib.rs_nccl_describe.restype = C.c_char_p
    lib.rs_nccl_last_error.restype = C.c_char_p
    desc = lib.rs_nccl_describe().decode()
    expect(desc.startswith("nccl ") or desc.startswith("none ("), f"nccl describe: {desc}")
    if lib.rs_nccl_available() == 0:
        uid = C.create_string_buffer(128)
        expect(lib.rs_nccl_unique_id(uid) == 1 and b"cannot load NCCL" in lib.rs_nccl_last_error(), "nccl unique id without libnccl says why")
        comm = C.c_void_p()
        expect(lib.rs_nccl_init(C.byref(comm), 1, uid, 0, 0) == 1, "nccl init without libnccl fails cleanly")
    # The learner's ZeRO-1 collectives on a model (rs_nccl_model_*): a bad call fails with its reason, never crashes.
    lib.rs_nccl_model_reduce_scatter_grads.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_int32, C.c_int32, C.c_void_p]
    lib.rs_nccl_model_all_gather_params.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_int32]
    for name, rc in (("reduce-scatter", lib.rs_nccl_model_reduce_scatter_grads(None, None, None, 1, 0, None)),
                     ("all-gather", lib.rs_nccl_model_all_gather_params(None, None, None, 1))):
        why = lib.rs_nccl_last_error().decode()
        expect(rc == 1 and ("cannot load NCCL" in why or "null model" in why), f"nccl model {name} without a model or NCCL says why: {why}")


cuda = os.path.join(build, "librollstream_cuda.so")
cpu = os.path.join(build, "librollstream_cpu.so")
if os.path.exists(cuda):
    cuda_without_device(cuda)
    nccl_without_device(cuda)
else:
    print(f"skip: {cuda} not built")
if os.path.exists(cpu):
    cpu_wrappers(cpu)
    if os.path.exists(cuda):
        exports_match(cuda, cpu)
else:
    print(f"skip: {cpu} not built")
print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)

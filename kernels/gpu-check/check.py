"""Correctness check of the kernels C ABI on a GPU machine (python3 + numpy + torch + transformers +
safetensors; no Node). Every kernel of librollstream_cuda.so (and, when given, librollstream_cpu.so, which
validates the check itself: a test that fails on both backends is a bug in the check) is compared on fresh
random inputs with a float64 PyTorch reference computed on the CPU; gradients with torch autograd; the whole
model's logits, loss, gradients, optimizer step and generation with transformers' LlamaForCausalLM and
Qwen2ForCausalLM built from tiny random configs and loaded from the same safetensors file.

Errors are max|got - ref| / max|ref| (normalised max error). Tolerances: 1e-5 for the fp32 kernels; 1e-4 for
the fp32 model (two layers of fp32 ops against float64); bf16 model matmuls (rs_settings.cuda_matmul bf16)
1e-2 on logits, 5e-2 on gradients.

  python3 check.py --cuda kernels/build/Release/librollstream_cuda.so [--cpu .../librollstream_cpu.so] [--seed N]
Prints a table, then `N passed, N failed`; exits 1 when anything failed."""
import argparse
import ctypes as C
import json
import math
import os
import sys
import tempfile
import time
import traceback

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, here)
import rsabi  # noqa: E402
from rsabi import call, f32, i32  # noqa: E402

import torch  # noqa: E402  (after rsabi: numpy first; torch's libcublas then lets our dlopen find it)

torch.set_grad_enabled(True)
F64 = torch.float64

TOL_FP32 = 1e-5
TOL_MODEL_FP32 = 1e-4
TOL_MODEL_BF16_LOGITS = 1e-2
TOL_MODEL_BF16_GRADS = 5e-2


def p(a):
    """Typed pointer to a numpy array (None passes through)."""
    if a is None:
        return None
    kinds = {np.float32: rsabi.F32P, np.int32: rsabi.I32P, np.uint8: rsabi.U8P, np.int64: rsabi.I64P, np.float64: rsabi.F64P,
             np.uint64: rsabi.U64P}
    assert a.flags["C_CONTIGUOUS"], "array must be C-contiguous"
    return a.ctypes.data_as(kinds[a.dtype.type])


def nerr(got, ref):
    """Normalised max error; inf when shapes differ or got is not finite."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=F64, requires_grad=grad)


class Report:
    def __init__(self):
        self.rows = []

    def add(self, test, backend, err, tol, note=""):
        ok = err <= tol and not math.isnan(err)
        self.rows.append((test, backend, err, tol, "pass" if ok else "FAIL", note))
        print(f"  {'ok  ' if ok else 'FAIL'} {backend:<10} {test:<44} err={err:.3g} tol={tol:.0e} {note}", flush=True)

    def crash(self, test, backend, exc):
        self.rows.append((test, backend, float("nan"), 0.0, "FAIL", f"{type(exc).__name__}: {exc}"[:160]))
        print(f"  FAIL {backend:<10} {test:<44} raised {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc(limit=3)

    def table(self):
        w = max(len(r[0]) for r in self.rows) if self.rows else 10
        print(f"\n{'test':<{w}}  {'backend':<10} {'error':>10} {'tol':>7}  status  note")
        for t, b, e, tol, s, n in self.rows:
            print(f"{t:<{w}}  {b:<10} {e:>10.3g} {tol:>7.0e}  {s:<6}  {n}")
        passed = sum(1 for r in self.rows if r[4] == "pass")
        failed = len(self.rows) - passed
        print(f"\n{passed} passed, {failed} failed")
        return failed


# ------------------------------------------------------------------------------------------------- kernels

def k_embedding(lib, be, R, rep):
    V, D, T = 101, 48, 257
    table = f32(R.standard_normal((V, D)))
    ids = i32(R.integers(0, V, T))
    ids[[5, 9, 100]] = ids[3]  # a repeated id must accumulate in order
    out = np.zeros((T, D), np.float32)
    call("rs_embedding_fwd", lib.rs_embedding_fwd, p(table), V, D, p(ids), T, p(out))
    rep.add("embedding_fwd", be, nerr(out, table[ids]), 0.0)
    dout = f32(R.standard_normal((T, D)))
    d0 = f32(R.standard_normal((V, D)))
    dt = d0.copy()
    call("rs_embedding_bwd", lib.rs_embedding_bwd, p(dout), p(ids), T, V, D, p(dt))
    ref = d0.astype(np.float64)
    np.add.at(ref, ids, dout.astype(np.float64))
    rep.add("embedding_bwd", be, nerr(dt, ref), TOL_FP32)


def rms_ref(x, w, eps):
    rstd = 1.0 / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return w * (x * rstd), rstd[:, 0]


def k_rmsnorm(lib, be, R, rep):
    T, D, eps = 67, 200, 1e-5
    x = f32(R.standard_normal((T, D)) * 2)
    w = f32(1 + 0.3 * R.standard_normal(D))
    y = np.zeros((T, D), np.float32)
    rstd = np.zeros(T, np.float32)
    call("rs_rmsnorm_fwd", lib.rs_rmsnorm_fwd, p(x), p(w), T, D, eps, p(y), p(rstd))
    xt, wt = t64(x, True), t64(w, True)
    yr, rr = rms_ref(xt, wt, eps)
    rep.add("rmsnorm_fwd y", be, nerr(y, yr.detach().numpy()), TOL_FP32)
    rep.add("rmsnorm_fwd rstd", be, nerr(rstd, rr.detach().numpy()), TOL_FP32)
    dy = f32(R.standard_normal((T, D)))
    dw0 = f32(R.standard_normal(D))
    dx = np.zeros((T, D), np.float32)
    dw = dw0.copy()
    call("rs_rmsnorm_bwd", lib.rs_rmsnorm_bwd, p(dy), p(x), p(w), p(rstd), T, D, p(dx), p(dw))
    (yr * t64(dy)).sum().backward()
    rep.add("rmsnorm_bwd dx", be, nerr(dx, xt.grad.numpy()), TOL_FP32)
    rep.add("rmsnorm_bwd dw (accumulated)", be, nerr(dw, dw0 + wt.grad.numpy()), TOL_FP32)

    res = f32(R.standard_normal((T, D)))
    r = np.zeros((T, D), np.float32)
    call("rs_residual_rmsnorm_fwd", lib.rs_residual_rmsnorm_fwd, p(x), p(res), p(w), T, D, eps, p(r), p(y), p(rstd))
    xt, rt_, wt = t64(x, True), t64(res, True), t64(w, True)
    rsum = xt + rt_
    yr, rr = rms_ref(rsum, wt, eps)
    rep.add("residual_rmsnorm_fwd r", be, nerr(r, rsum.detach().numpy()), TOL_FP32)
    rep.add("residual_rmsnorm_fwd y", be, nerr(y, yr.detach().numpy()), TOL_FP32)
    dr_in = f32(R.standard_normal((T, D)))
    dw = dw0.copy()
    call("rs_residual_rmsnorm_bwd", lib.rs_residual_rmsnorm_bwd, p(dy), p(dr_in), p(r), p(w), p(rstd), T, D, p(dx), p(dw))
    ((yr * t64(dy)).sum() + (rsum * t64(dr_in)).sum()).backward()
    rep.add("residual_rmsnorm_bwd dx (+dr_in)", be, nerr(dx, xt.grad.numpy()), TOL_FP32)
    rep.add("residual_rmsnorm_bwd dx == d residual", be, nerr(xt.grad.numpy(), rt_.grad.numpy()), 0.0, "(reference self-check)")
    rep.add("residual_rmsnorm_bwd dw", be, nerr(dw, dw0 + wt.grad.numpy()), TOL_FP32)
    call("rs_residual_rmsnorm_bwd", lib.rs_residual_rmsnorm_bwd, p(dy), None, p(r), p(w), p(rstd), T, D, p(dx), None)
    rep.add("residual_rmsnorm_bwd dr_in=NULL", be, nerr(dx, xt.grad.numpy() - dr_in), TOL_FP32)


def blas_available(lib):
    return not json.loads(rsabi.info(lib))["blas"].startswith("none")


def k_sgemm(lib, be, R, rep):
    impls = [0, 1] + ([2] if blas_available(lib) else [])
    for (M, N, K) in [(37, 53, 71), (130, 200, 300), (1, 257, 64), (5, 3, 0)]:
        for ta in (0, 1):
            for tb in (0, 1):
                ar, ac = (K, M) if ta else (M, K)
                br, bc = (N, K) if tb else (K, N)
                lda, ldb, ldc = ac + 3, bc + 2, N + 5
                A = f32(R.standard_normal((max(ar, 1), lda)))
                B = f32(R.standard_normal((max(br, 1), ldb)))
                C0 = f32(R.standard_normal((M, ldc)))
                opA = A[:ar, :ac].astype(np.float64)
                opB = B[:br, :bc].astype(np.float64)
                opA = opA.T if ta else opA
                opB = opB.T if tb else opB
                alpha, beta = 1.3, 0.5
                ref = C0.astype(np.float64).copy()
                ref[:, :N] = alpha * (opA @ opB if K > 0 else np.zeros((M, N))) + beta * ref[:, :N]
                for impl in impls:
                    Cm = C0.copy()
                    call("rs_sgemm", lib.rs_sgemm, ta, tb, M, N, K, alpha, p(A), lda, p(B), ldb, beta, p(Cm), ldc, impl)
                    pad_ok = np.array_equal(Cm[:, N:], C0[:, N:])
                    rep.add(f"sgemm {M}x{N}x{K} t{ta}{tb} impl{impl}", be, nerr(Cm[:, :N], ref[:, :N]) if pad_ok else float("inf"),
                            TOL_FP32, "" if pad_ok else "wrote outside [M, N]")


def k_matmul(lib, be, R, rep):
    N, din, dout_ = 45, 70, 33
    x = f32(R.standard_normal((N, din)))
    W = f32(R.standard_normal((dout_, din)) * 0.2)
    b = f32(R.standard_normal(dout_))
    y = np.zeros((N, dout_), np.float32)
    call("rs_matmul_fwd", lib.rs_matmul_fwd, p(x), p(W), p(b), N, din, dout_, p(y))
    rep.add("matmul_fwd (+bias)", be, nerr(y, x.astype(np.float64) @ W.astype(np.float64).T + b), TOL_FP32)
    dy = f32(R.standard_normal((N, dout_)))
    dx = np.zeros((N, din), np.float32)
    dW0, db0 = f32(R.standard_normal((dout_, din))), f32(R.standard_normal(dout_))
    dW, db = dW0.copy(), db0.copy()
    call("rs_matmul_bwd", lib.rs_matmul_bwd, p(dy), p(x), p(W), N, din, dout_, p(dx), p(dW), p(db))
    dy64 = dy.astype(np.float64)
    rep.add("matmul_bwd dx", be, nerr(dx, dy64 @ W.astype(np.float64)), TOL_FP32)
    rep.add("matmul_bwd dW (accumulated)", be, nerr(dW, dW0 + dy64.T @ x.astype(np.float64)), TOL_FP32)
    rep.add("matmul_bwd db (accumulated)", be, nerr(db, db0 + dy64.sum(0)), TOL_FP32)


def rope_tables(pos, hd, theta):
    """cos/sin [T, hd/2] in float64 from the float32 angles of the documented formula (kernels.h / HF)."""
    half = hd // 2
    theta_f = np.float32(theta)
    e = np.array([np.float32(2 * i) / np.float32(hd) for i in range(half)], dtype=np.float32)
    inv = (np.float32(1.0) / np.power(np.float64(theta_f), e.astype(np.float64)).astype(np.float32)).astype(np.float32)
    ang = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float32)
    return np.cos(ang.astype(np.float64)), np.sin(ang.astype(np.float64)), inv


def rope_ref(x, cos, sin):
    half = x.shape[-1] // 2
    c = torch.tensor(cos)[:, None, :]
    s = torch.tensor(sin)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def k_rope(lib, be, R, rep):
    for (T, H, hd, theta) in [(50, 3, 64, 1e4), (20, 2, 6, 1e6), (33, 14, 128, 5e5)]:
        pos = i32(R.integers(0, 4000, T))
        x = f32(R.standard_normal((T, H, hd)))
        y = np.zeros_like(x)
        call("rs_rope_fwd", lib.rs_rope_fwd, p(x), T, H, hd, p(pos), theta, p(y))
        cos, sin, inv = rope_tables(pos, hd, theta)
        xt = t64(x, True)
        yr = rope_ref(xt, cos, sin)
        rep.add(f"rope_fwd hd{hd} theta{theta:g}", be, nerr(y, yr.detach().numpy()), TOL_FP32)
        dy = f32(R.standard_normal((T, H, hd)))
        dx = np.zeros_like(x)
        call("rs_rope_bwd", lib.rs_rope_bwd, p(dy), T, H, hd, p(pos), theta, p(dx))
        (yr * t64(dy)).sum().backward()
        rep.add(f"rope_bwd hd{hd}", be, nerr(dx, xt.grad.numpy()), TOL_FP32)
    # Information: how far the documented inv_freq is from HF's torch float32 computation (ulps).
    hd, theta = 64, 1e4
    hf_inv = (1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))).numpy()
    _, _, inv = rope_tables(np.zeros(1, np.int32), hd, theta)
    ulps = np.abs(hf_inv.view(np.int32).astype(np.int64) - inv.view(np.int32).astype(np.int64)).max()
    rep.add("rope inv_freq vs HF torch float32 (ulps)", be, float(ulps), 1.0)


def attn_ref(q, k, v, segs, T):
    """float64 causal GQA attention inside segments: out [T, H, hd], lse [T, H]."""
    H, KV, hd = q.shape[1], k.shape[1], q.shape[2]
    g = H // KV
    outs, lses = [], []
    bounds = list(segs) + [T]
    for b, e in zip(bounds[:-1], bounds[1:]):
        qs = q[b:e].transpose(0, 1)
        ks = k[b:e].repeat_interleave(g, dim=1).transpose(0, 1)
        vs = v[b:e].repeat_interleave(g, dim=1).transpose(0, 1)
        s = qs @ ks.transpose(1, 2) / math.sqrt(hd)
        n = e - b
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        s = s.masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(s, -1)
        o = torch.softmax(s, -1) @ vs
        outs.append(o.transpose(0, 1))
        lses.append(lse.transpose(0, 1))
    return torch.cat(outs, 0), torch.cat(lses, 0)


def k_attention(lib, be, R, rep):
    cases = [(40, 4, 2, 8, [0, 17, 30]), (300, 14, 2, 64, None), (130, 4, 4, 128, [0]), (77, 2, 1, 80, [0, 1, 40]),
             (50, 2, 2, 256, [0, 25]), (1, 2, 1, 16, [0]), (70, 8, 1, 32, [0, 33, 34, 35])]
    for (T, H, KV, hd, segs) in cases:
        if segs is None:
            cuts = sorted(R.choice(np.arange(1, T), 4, replace=False).tolist())
            segs = [0] + cuts
        seg = i32(segs)
        q = f32(R.standard_normal((T, H, hd)))
        k = f32(R.standard_normal((T, KV, hd)))
        v = f32(R.standard_normal((T, KV, hd)))
        out = np.zeros((T, H, hd), np.float32)
        lse = np.zeros((T, H), np.float32)
        call("rs_attention_fwd", lib.rs_attention_fwd, p(q), p(k), p(v), T, H, KV, hd, p(seg), len(segs), p(out), p(lse))
        qt, kt, vt = t64(q, True), t64(k, True), t64(v, True)
        o_ref, l_ref = attn_ref(qt, kt, vt, segs, T)
        name = f"attention T{T} H{H}/{KV} hd{hd} S{len(segs)}"
        rep.add(name + " fwd out", be, nerr(out, o_ref.detach().numpy()), TOL_FP32)
        rep.add(name + " fwd lse", be, nerr(lse, l_ref.detach().numpy()), TOL_FP32)
        dout = f32(R.standard_normal((T, H, hd)))
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        call("rs_attention_bwd", lib.rs_attention_bwd, p(dout), p(q), p(k), p(v), p(out), p(lse), T, H, KV, hd, p(seg), len(segs), p(dq),
             p(dk), p(dv))
        (o_ref * t64(dout)).sum().backward()
        rep.add(name + " bwd dq", be, nerr(dq, qt.grad.numpy()), TOL_FP32)
        rep.add(name + " bwd dk", be, nerr(dk, kt.grad.numpy()), TOL_FP32)
        rep.add(name + " bwd dv", be, nerr(dv, vt.grad.numpy()), TOL_FP32)


def k_swiglu(lib, be, R, rep):
    n = 10007
    g = f32(R.standard_normal(n) * 3)
    u = f32(R.standard_normal(n))
    h = np.zeros(n, np.float32)
    call("rs_swiglu_fwd", lib.rs_swiglu_fwd, p(g), p(u), n, p(h))
    gt, ut = t64(g, True), t64(u, True)
    hr = torch.nn.functional.silu(gt) * ut
    rep.add("swiglu_fwd", be, nerr(h, hr.detach().numpy()), TOL_FP32)
    dh = f32(R.standard_normal(n))
    dg, du = np.zeros(n, np.float32), np.zeros(n, np.float32)
    call("rs_swiglu_bwd", lib.rs_swiglu_bwd, p(dh), p(g), p(u), n, p(dg), p(du))
    (hr * t64(dh)).sum().backward()
    rep.add("swiglu_bwd dgate", be, nerr(dg, gt.grad.numpy()), TOL_FP32)
    rep.add("swiglu_bwd dup", be, nerr(du, ut.grad.numpy()), TOL_FP32)


def loss_ref(z, tgt, mask, adv, slp, kind, spec):
    """float64 reference of rs_loss_fwd_bwd: (total loss tensor, per-row dict of numpy arrays)."""
    lsm = torch.log_softmax(z, -1)
    rows = torch.arange(z.shape[0])
    logp = lsm[rows, torch.tensor(tgt, dtype=torch.long)]
    ent = -(lsm.exp() * lsm).sum(-1)
    m = torch.tensor(mask.astype(bool))
    norm = spec.normalizer
    if kind == rsabi.LOSS_SFT:
        per = -logp / norm
        ratio = torch.zeros_like(logp)
        k3 = torch.zeros_like(logp)
        masked = torch.zeros_like(m)
    else:
        d = logp - torch.tensor(slp, dtype=F64)
        ratio = d.exp()
        k3 = ratio - d - 1
        A = torch.tensor(adv, dtype=F64)
        masked = (ratio < spec.mask_low) | (ratio > spec.mask_high)
        if kind == rsabi.LOSS_RL:
            per = (-ratio * A + spec.kl_coef * k3) / norm
        else:
            clipped = ratio.clamp(1 - spec.clip_eps, 1 + spec.clip_eps_high)
            per = (-torch.minimum(ratio * A, clipped * A) + spec.kl_coef * k3) / norm
        per = torch.where(masked, torch.zeros_like(per), per)
    total = per[m].sum()
    stats = {"loss": total.item(), "loss_tokens": float(m.sum()), "masked_tokens": float((masked & m).sum()),
             "entropy_sum": ent[m].sum().item(), "mismatch_kl_sum": k3[m].sum().item(), "logp_sum": logp[m].sum().item(),
             "ratio_sum": ratio[m].sum().item()}
    return total, logp.detach().numpy() * mask, stats


def k_loss(lib, be, R, rep):
    N = 37
    for V in (1000, 50021):
        for kind, name in ((rsabi.LOSS_SFT, "sft"), (rsabi.LOSS_RL, "rl"), (rsabi.LOSS_PPO_CLIP, "ppo_clip")):
            logits = f32(R.standard_normal((N, V)) * 3)
            tgt = i32(R.integers(0, V, N))
            mask = (R.random(N) < 0.8).astype(np.uint8)
            adv = f32(R.standard_normal(N))
            zt = t64(logits, True)
            true_lp = torch.log_softmax(zt.detach(), -1)[torch.arange(N), torch.tensor(tgt, dtype=torch.long)].numpy()
            slp = f32(true_lp + 0.4 * R.standard_normal(N))
            if kind == rsabi.LOSS_RL:
                spec = rsabi.loss_spec(kind, 20.0, mask_low=0.6, mask_high=1.6, kl_coef=0.1)
            elif kind == rsabi.LOSS_PPO_CLIP:
                spec = rsabi.loss_spec(kind, 20.0, clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.05)
            else:
                spec = rsabi.loss_spec(kind, 20.0)
            pol = kind != rsabi.LOSS_SFT
            total, lp_ref, st_ref = loss_ref(zt, tgt, mask, adv, slp, kind, spec)
            total.backward()
            for inplace in (False, True):
                z = logits.copy()
                dz = z if inplace else np.zeros_like(z)
                lp = np.zeros(N, np.float32)
                stats = rsabi.LossStats()
                call("rs_loss_fwd_bwd", lib.rs_loss_fwd_bwd, p(z), N, V, p(tgt), p(mask), p(adv) if pol else None, p(slp) if pol else None,
                     C.byref(spec), p(dz), p(lp), C.byref(stats))
                tag = f"loss {name} V{V}{' in-place' if inplace else ''}"
                rep.add(tag + " dlogits", be, nerr(dz, zt.grad.numpy()), TOL_FP32)
                if inplace:
                    continue
                rep.add(tag + " token logp", be, nerr(lp, lp_ref), TOL_FP32)
                got = np.array([getattr(stats, k) for k in st_ref])
                want = np.array(list(st_ref.values()))
                rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-12)
                rep.add(tag + " stats", be, float(rel.max()), TOL_FP32, f"masked {stats.masked_tokens:g}/{stats.loss_tokens:g}")
            # stats only (dlogits NULL)
            stats = rsabi.LossStats()
            call("rs_loss_fwd_bwd", lib.rs_loss_fwd_bwd, p(logits), N, V, p(tgt), p(mask), p(adv) if pol else None,
                 p(slp) if pol else None, C.byref(spec), None, None, C.byref(stats))
            rep.add(f"loss {name} V{V} dlogits=NULL loss", be, abs(stats.loss - st_ref["loss"]) / max(abs(st_ref["loss"]), 1e-12), TOL_FP32)


def k_optim(lib, be, R, rep):
    n = 3_000_017
    g = f32(R.standard_normal(n))
    out = C.c_double()
    call("rs_grad_norm", lib.rs_grad_norm, p(g), n, C.byref(out))
    ref = math.sqrt((g.astype(np.float64) ** 2).sum())
    rep.add("grad_norm", be, abs(out.value - ref) / ref, 1e-9)

    n = 10007
    p0 = f32(R.standard_normal(n))
    gr = f32(R.standard_normal(n) * 0.1)
    m0 = f32(R.standard_normal(n) * 0.01)
    v0 = f32(np.abs(R.standard_normal(n)) * 1e-3)
    lr, b1, b2, eps, wd, step, scale = 1e-2, 0.9, 0.95, 1e-8, 0.1, 7, 0.5
    pp, mm, vv = p0.copy(), m0.copy(), v0.copy()
    call("rs_adamw", lib.rs_adamw, p(pp), p(gr), p(mm), p(vv), n, lr, b1, b2, eps, wd, step, scale)
    g64 = gr.astype(np.float64) * scale
    m64 = b1 * m0 + (1 - b1) * g64
    v64 = b2 * v0 + (1 - b2) * g64 * g64
    p64 = p0 * (1 - lr * wd) - lr / (1 - b1 ** step) * m64 / (np.sqrt(v64) / math.sqrt(1 - b2 ** step) + eps)
    rep.add("adamw p", be, nerr(pp, p64), TOL_FP32)
    rep.add("adamw update (p - p0)", be, nerr(pp.astype(np.float64) - p0, p64 - p0), 1e-4)
    rep.add("adamw m", be, nerr(mm, m64), TOL_FP32)
    rep.add("adamw v", be, nerr(vv, v64), TOL_FP32)
    # Against torch.optim.AdamW (float64), three steps from a zero state.
    pt = t64(p0, True)
    opt = torch.optim.AdamW([pt], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    pp, mm, vv = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    for s in range(1, 4):
        gs = f32(R.standard_normal(n) * 0.1)
        pt.grad = t64(gs)
        opt.step()
        call("rs_adamw", lib.rs_adamw, p(pp), p(gs), p(mm), p(vv), n, lr, b1, b2, eps, wd, s, 1.0)
    rep.add("adamw vs torch.optim.AdamW (3 steps)", be, nerr(pp, pt.detach().numpy()), TOL_FP32)


KERNEL_TESTS = [k_embedding, k_rmsnorm, k_sgemm, k_matmul, k_rope, k_attention, k_swiglu, k_loss, k_optim]


# --------------------------------------------------------------------------------------------------- model

def build_hf(family, seed, path):
    """A tiny random HF model saved to `path` (safetensors, fp32) and reloaded as a float64 reference.
    Returns (reference model, rs_model_config dict, state dict of numpy arrays)."""
    import safetensors.torch
    import transformers
    torch.manual_seed(seed)
    if family == "llama":
        kw = dict(vocab_size=131, hidden_size=256, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                  attention_bias=False)
        cfg, cls = transformers.LlamaConfig(**kw, attn_implementation="eager"), transformers.LlamaForCausalLM
    else:  # Qwen2-0.5B-like ratios: 14 query heads over 2 kv heads, q/k/v biases, tied embeddings
        kw = dict(vocab_size=151, hidden_size=112, intermediate_size=160, num_hidden_layers=2, num_attention_heads=14,
                  num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                  use_sliding_window=False)
        cfg, cls = transformers.Qwen2Config(**kw, attn_implementation="eager"), transformers.Qwen2ForCausalLM
    m = cls(cfg)
    with torch.no_grad():
        for name, prm in m.named_parameters():
            if prm.dim() == 1:
                if "norm" in name:
                    prm.copy_(1.0 + 0.2 * torch.randn_like(prm))
                else:
                    prm.copy_(0.05 * torch.randn_like(prm))
            else:
                prm.mul_(2.5)  # std 0.05: attention patterns and logits that are not nearly uniform
    safetensors.torch.save_model(m, path)
    state = safetensors.torch.load_file(path)
    # save_model() writes a tied pair once, under either name; our layout names the embedding.
    if "model.embed_tokens.weight" not in state:
        state["model.embed_tokens.weight"] = state["lm_head.weight"]
    ref = cls(cfg)
    ref.load_state_dict(state, strict=False)
    ref.tie_weights()
    ref = ref.double().eval()
    theta = getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]
    ours = dict(rope_theta=float(theta), rms_norm_eps=float(cfg.rms_norm_eps), vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                intermediate_size=cfg.intermediate_size, num_layers=cfg.num_hidden_layers, num_heads=cfg.num_attention_heads,
                num_kv_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
                tie_word_embeddings=int(bool(cfg.tie_word_embeddings)), attention_bias=int(family == "qwen2"), threads=0)
    return ref, ours, {k: v.float().numpy() for k, v in state.items()}


def hf_logits(ref, tokens, segs):
    """float64 logits [T, V] of each segment run on its own (positions restart at 0)."""
    bounds = list(segs) + [len(tokens)]
    out = []
    for b, e in zip(bounds[:-1], bounds[1:]):
        out.append(ref(input_ids=torch.tensor([tokens[b:e]], dtype=torch.long)).logits[0])
    return torch.cat(out, 0)


def make_model(lib, ours, state, mode):
    rsabi.configure(lib, cuda_matmul=mode or None)  # read by rs_model_create
    try:
        m = rsabi.Model(lib, ours, seed=1)
    finally:
        rsabi.configure(lib, cuda_matmul=None)
    m.load_state(state)
    return m


def model_tests(family, lib, be, mode, ref, ours, state, R, rep, cross):
    tol_l = TOL_MODEL_BF16_LOGITS if mode == "bf16" else TOL_MODEL_FP32
    tol_g = TOL_MODEL_BF16_GRADS if mode == "bf16" else TOL_MODEL_FP32
    tag = f"{family}"
    bk = be + ("/" + mode if mode else "")
    m = make_model(lib, ours, state, mode)
    V = ours["vocab_size"]
    # packed row: three segments, one of them a single token
    lens = [37, 1, 50]
    segs = [0, 37, 38]
    T = sum(lens)
    tokens = R.integers(0, V, T).astype(np.int32)
    logits = m.forward(tokens, segs)
    with torch.no_grad():
        ref_logits = hf_logits(ref, tokens.tolist(), segs)
    rep.add(f"{tag} logits vs HF (packed segments)", bk, nerr(logits, ref_logits.numpy()), tol_l)

    # SFT train micro-batch: loss, token logprobs and every parameter gradient against HF autograd (float64)
    mask = (R.random(T) < 0.7).astype(np.uint8)
    mask[segs] = 0
    norm = float(mask.sum())
    ref.zero_grad(set_to_none=True)
    lg = hf_logits(ref, tokens.tolist(), segs)
    lsm = torch.log_softmax(lg, -1)
    idx = np.nonzero(mask)[0]
    tlp = lsm[torch.tensor(idx - 1), torch.tensor(tokens[idx], dtype=torch.long)]
    loss = -tlp.sum() / norm
    loss.backward()
    m.zero_grad()
    stats, lp = m.train_micro(tokens, segs, mask, rsabi.loss_spec(rsabi.LOSS_SFT, norm))
    rep.add(f"{tag} train sft loss", bk, abs(stats["loss"] - loss.item()) / abs(loss.item()), tol_l)
    rep.add(f"{tag} train sft token logp", bk, nerr(lp[idx], tlp.detach().numpy()), tol_l)
    grads = m.state(rsabi.GRADS)
    named = dict(ref.named_parameters())
    worst, worst_name = 0.0, ""
    for name, g in grads.items():
        e = nerr(g, named[name].grad.numpy())
        if e > worst:
            worst, worst_name = e, name
    rep.add(f"{tag} train sft grads (worst tensor)", bk, worst, tol_g, worst_name)

    # Determinism: the same micro-batch again gives bit-identical grads.
    m.zero_grad()
    m.train_micro(tokens, segs, mask, rsabi.loss_spec(rsabi.LOSS_SFT, norm))
    again = m.read(rsabi.GRADS)
    first = np.concatenate([grads[t["name"]].reshape(-1) for t in m.tensors()])
    rep.add(f"{tag} train bit-identical on repeat", bk, 0.0 if np.array_equal(again, first) else 1.0, 0.0)

    # PPO-clip loss with KL (policy path) against a float64 implementation on HF logits
    adv = f32(R.standard_normal(T))
    slp = np.zeros(T, np.float32)
    slp[idx] = tlp.detach().numpy() + 0.3 * R.standard_normal(len(idx))
    spec = rsabi.loss_spec(rsabi.LOSS_PPO_CLIP, norm, clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.05)
    ref.zero_grad(set_to_none=True)
    lg = hf_logits(ref, tokens.tolist(), segs)
    tl = torch.log_softmax(lg, -1)[torch.tensor(idx - 1), torch.tensor(tokens[idx], dtype=torch.long)]
    d = tl - torch.tensor(slp[idx], dtype=F64)
    ratio = d.exp()
    A = torch.tensor(adv[idx], dtype=F64)
    ppo = (-torch.minimum(ratio * A, ratio.clamp(0.8, 1.28) * A) + 0.05 * (ratio - d - 1)).sum() / norm
    ppo.backward()
    m.zero_grad()
    stats, _ = m.train_micro(tokens, segs, mask, spec, adv=adv, slp=slp)
    rep.add(f"{tag} train ppo_clip+kl loss", bk, abs(stats["loss"] - ppo.item()) / max(abs(ppo.item()), 1e-12), tol_l)
    grads = m.state(rsabi.GRADS)
    worst, worst_name = 0.0, ""
    for name, g in grads.items():
        e = nerr(g, named[name].grad.numpy())
        if e > worst:
            worst, worst_name = e, name
    rep.add(f"{tag} train ppo_clip grads (worst tensor)", bk, worst, tol_g, worst_name)

    # Optimizer step: torch AdamW (float64) with global-norm clipping on OUR grads and params, weight decay on matrices.
    p0 = m.read(rsabi.PARAMS)
    g0 = m.read(rsabi.GRADS)
    tens = m.tensors()
    tp = {t["name"]: t64(p0[t["offset"]:t["offset"] + t["size"]].reshape(t["shape"]), True) for t in tens}
    for t in tens:
        tp[t["name"]].grad = t64(g0[t["offset"]:t["offset"] + t["size"]].reshape(t["shape"]))
    max_norm = 0.5
    total = torch.nn.utils.clip_grad_norm_(list(tp.values()), max_norm)
    opt = torch.optim.AdamW([{"params": [tp[t["name"]] for t in tens if t["weight_decay"]], "weight_decay": 0.1},
                             {"params": [tp[t["name"]] for t in tens if not t["weight_decay"]], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    opt.step()
    r = m.step(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_grad_norm=max_norm)
    rep.add(f"{tag} step grad_norm", bk, abs(r["grad_norm"] - total.item()) / total.item(), 1e-6, f"clipped={r['clipped']}")
    p1 = m.read(rsabi.PARAMS)
    p_ref = np.concatenate([tp[t["name"]].detach().numpy().reshape(-1) for t in tens])
    rep.add(f"{tag} step params vs torch AdamW", bk, nerr(p1, p_ref), TOL_FP32)
    rep.add(f"{tag} step update vs torch AdamW", bk, nerr(p1.astype(np.float64) - p0, p_ref - p0), 1e-3)
    rep.add(f"{tag} step zeroes grads", bk, float(np.abs(m.read(rsabi.GRADS)).max()), 0.0)
    m.load_state(state)  # back to the file's weights for generation

    # Generation: greedy and sampled, checked against HF teacher-forced float64 logits.
    prompts = [R.integers(0, V, n).tolist() for n in (5, 17, 1, 30)]
    for temp, top_p, top_k, label in ((0.0, 1.0, 0, "greedy"), (0.8, 1.0, 0, "t0.8"), (1.0, 0.9, 20, "t1 top-p0.9 top-k20")):
        out = m.generate(prompts, 12, temperature=temp, top_p=top_p, top_k=top_k, seed=1234)
        e_plp = e_slp = 0.0
        arg_gap = 0.0
        for i, pr in enumerate(prompts):
            toks = out["tokens"][i]
            if not toks:
                continue
            full = pr + toks
            with torch.no_grad():
                lgt = ref(input_ids=torch.tensor([full], dtype=torch.long)).logits[0].numpy()
            for j, tk in enumerate(toks):
                z = lgt[len(pr) - 1 + j]
                lse = np.log(np.exp(z - z.max()).sum()) + z.max()
                e_plp = max(e_plp, abs(out["policy_logprobs"][i][j] - (z[tk] - lse)))
                if temp == 0:
                    arg_gap = max(arg_gap, z.max() - z[tk])
                    e_slp = max(e_slp, abs(out["logprobs"][i][j]))
                else:
                    order = np.lexsort((np.arange(V), -z))  # by logit desc, ties lower id
                    n = top_k if 0 < top_k < V else V
                    keep = order[:n]
                    pz = np.exp((z[keep] - z[keep].max()) / temp)
                    if top_p < 1:
                        c = np.cumsum(pz)
                        cut = int(np.searchsorted(c, top_p * pz.sum())) + 1
                        keep, pz = keep[:cut], pz[:cut]
                    if tk in keep:  # (a token at the top-p boundary can differ by rounding; then skip it)
                        e_slp = max(e_slp, abs(out["logprobs"][i][j] - math.log(pz[list(keep).index(tk)] / pz.sum())))
        rep.add(f"{tag} generate {label} policy logprob", bk, e_plp, tol_l * 10, "(abs, nats)")
        rep.add(f"{tag} generate {label} sample logprob", bk, e_slp, tol_l * 10, "(abs, nats)")
        if temp == 0:
            rep.add(f"{tag} generate greedy = HF argmax", bk, arg_gap, tol_l * 10, "(logit gap to HF max)")
        cross.setdefault((family, label), {})[bk] = out["tokens"]

    # Batch independence: a prompt alone and inside a batch, with the same per-sequence seed, gives the same tokens/bits.
    seeds = np.array([11, 22, 33, 44], dtype=np.uint64)
    batch = m.generate(prompts, 10, temperature=1.0, seeds=seeds)
    alone = m.generate([prompts[1]], 10, temperature=1.0, seeds=seeds[1:2])
    same = batch["tokens"][1] == alone["tokens"][0] and np.array_equal(batch["logprobs"][1], alone["logprobs"][0])
    rep.add(f"{tag} generate batch-independent", bk, 0.0 if same else 1.0, 0.0)

    # Errors come back as statuses with messages, not crashes.
    try:
        m.forward(np.array([1, V + 5], np.int32), [0])
        rep.add(f"{tag} bad token id rejected", bk, 1.0, 0.0, "no error raised")
    except rsabi.KernelError as e:
        rep.add(f"{tag} bad token id rejected", bk, 0.0 if e.code == 1 and "outside the vocab" in e.message else 1.0, 0.0, e.message[:60])
    m.free()


def cross_backend(cross, rep):
    """Sampled tokens of the CUDA fp32 and CPU backends (same weights, same seeds): the RNG and the sampling rule
    are shared, so sequences should agree except where float rounding moves a draw across a boundary (rare)."""
    for (family, label), per in cross.items():
        a, b = per.get("cuda/fp32"), per.get("cpu")
        if a is None or b is None:
            continue
        same = sum(1 for x, y in zip(a, b) if x == y)
        rep.add(f"{family} generate {label} cuda/fp32 == cpu", "both", 1.0 - same / len(a), 0.25, f"{same}/{len(a)} sequences identical")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda", default=os.path.join(here, "..", "build", "Release", "librollstream_cuda.so"))
    ap.add_argument("--cpu", default=None, help="also run every check on the CPU backend (validates the check)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--cublas", default="", help="the libcublas file the CUDA backend loads (rs_settings.cublas_lib)")
    ap.add_argument("--sync", action="store_true", help="synchronise after every kernel so a fault names it (rs_settings.cuda_sync)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"check.py seed {seed} (rerun with --seed {seed})  torch {torch.__version__}")
    rep = Report()
    backends = []
    if args.cuda:
        lib = rsabi.load(args.cuda, cublas_lib=args.cublas, cuda_sync=int(args.sync))
        print("cuda backend:", rsabi.info(lib))
        if lib.rs_device_count() < 1:
            print("FAIL: the CUDA backend sees no device")
            sys.exit(1)
        backends.append(("cuda", lib))
    if args.cpu and os.path.exists(args.cpu):
        lib = rsabi.load(args.cpu)
        print("cpu backend: ", rsabi.info(lib))
        backends.append(("cpu", lib))
    t0 = time.time()
    for be, lib in backends:
        for test in KERNEL_TESTS:
            R = np.random.default_rng([seed, KERNEL_TESTS.index(test)])
            try:
                test(lib, be, R, rep)
            except Exception as e:  # a crash inside one test is a failure, the rest still run
                rep.crash(test.__name__, be, e)
    print(f"kernels: {time.time() - t0:.1f} s")
    if not args.skip_models:
        cross = {}
        with tempfile.TemporaryDirectory() as d:
            for family in ("llama", "qwen2"):
                path = os.path.join(d, f"{family}.safetensors")
                try:
                    ref, ours, state = build_hf(family, seed, path)
                except Exception as e:
                    rep.crash(f"{family} build HF reference", "-", e)
                    continue
                for be, lib in backends:
                    for mode in (("fp32", "bf16") if be == "cuda" else (None,)):
                        R = np.random.default_rng([seed, 100 + len(family)])  # same inputs for every backend / mode
                        try:
                            model_tests(family, lib, be, mode, ref, ours, state, R, rep, cross)
                        except Exception as e:
                            rep.crash(f"{family} model", be + ("/" + mode if mode else ""), e)
        cross_backend(cross, rep)
    print(f"total: {time.time() - t0:.1f} s")
    failed = rep.table()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

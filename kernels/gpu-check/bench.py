"""Benchmark on a GPU machine (python3 + torch + transformers; no Node), in one run and on the same GPU:
  train step: our rs_model_train_micro + rs_model_step (bf16 matmuls, fp32 master weights) on the whole batch
              packed into one row, vs PyTorch + transformers (fp32 weights, bf16 autocast, fused AdamW, sdpa);
  decode:     our rs_model_generate vs HF generate (bf16 weights), batch 64, prompt 128, 128 new tokens, sampling
              at temperature 1 (no eos, so every sequence runs to the end).
Shapes (issue 6): small = 4 layers d128 vocab 128 (64 x 256); medium = 12 layers d768 vocab 32000 (16 x 1024);
qwen0.5b = 24 layers d896, 14/2 heads, MLP 4864, vocab 151936, tied, q/k/v bias (8 x 2048).
Also prints each shape's floors: matmul FLOPs at the H200's dense bf16 rate (989 TFLOP/s) for the train step,
and bytes at ~4.8 TB/s (HBM3e peak; 3.7 TB/s is a realistic sustained figure) for a decode step.

  python3 bench.py --cuda kernels/build/Release/librollstream_cuda.so [--shapes small,medium,qwen0.5b] [--steps 5]
The LAST line printed is one JSON object with every figure."""
import argparse
import gc
import json
import math
import os
import sys
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, here)
import rsabi  # noqa: E402

import torch  # noqa: E402

PEAK_BF16 = 989e12  # H200 SXM dense bf16 tensor-core FLOP/s
HBM_PEAK, HBM_REAL = 4.8e12, 3.7e12
REF = {  # issue 6: PyTorch + transformers on an H200 (tokens/s)
    "small": {"train": 970e3, "generate": 12.5e3},
    "medium": {"train": 228e3, "generate": 6.5e3},
    "qwen0.5b": {"train": 78.8e3, "generate": 2.85e3},
}
SHAPES = {
    "small": dict(family="llama", L=4, D=128, H=4, KV=4, I=512, V=128, tied=False, bias=False, B=64, S=256),
    "medium": dict(family="llama", L=12, D=768, H=12, KV=12, I=2048, V=32000, tied=False, bias=False, B=16, S=1024),
    "qwen0.5b": dict(family="qwen2", L=24, D=896, H=14, KV=2, I=4864, V=151936, tied=True, bias=True, B=8, S=2048),
}
GEN_B, GEN_PROMPT, GEN_NEW = 64, 128, 128


def our_cfg(s):
    return dict(rope_theta=1e6 if s["family"] == "qwen2" else 1e4, rms_norm_eps=1e-6, vocab_size=s["V"], hidden_size=s["D"],
                intermediate_size=s["I"], num_layers=s["L"], num_heads=s["H"], num_kv_heads=s["KV"], max_position_embeddings=4096,
                tie_word_embeddings=int(s["tied"]), attention_bias=int(s["bias"]), threads=0)


def counts(s):
    """Parameter counts: matmul weights per token (layers + LM head) and the total."""
    hd = s["D"] // s["H"]
    qkv = s["D"] * (s["H"] + 2 * s["KV"]) * hd
    layer = qkv + s["D"] * s["H"] * hd + 3 * s["D"] * s["I"]
    head = s["V"] * s["D"]
    total = s["L"] * (layer + 2 * s["D"] + (s["H"] + 2 * s["KV"]) * hd * s["bias"]) + s["D"] + head * (1 if s["tied"] else 2)
    return s["L"] * layer + head, total


def floors(s):
    """Lower bounds on time: train step FLOPs at the bf16 peak; decode step bytes at HBM bandwidth."""
    mm, total = counts(s)
    hd = s["D"] // s["H"]
    tokens = s["B"] * s["S"]
    attn_fwd = s["B"] * s["L"] * s["H"] * 4 * hd * (s["S"] * (s["S"] + 1) / 2)  # QK^T and PV, causal half
    train_flops = 6 * mm * tokens + 3 * attn_fwd
    ctx = GEN_PROMPT + GEN_NEW / 2  # mean context during decode
    kv_bytes = GEN_B * ctx * s["L"] * 2 * s["KV"] * hd * 2  # bf16 cache (ours is fp32 today: x2)
    step_bytes = 2 * total + kv_bytes  # every bf16 weight read once per step + the KV cache
    return {"train_flops": train_flops, "train_floor_s": train_flops / PEAK_BF16, "train_floor_tok_s": tokens / (train_flops / PEAK_BF16),
            "decode_step_bytes": step_bytes, "decode_floor_tok_s_peak": GEN_B / (step_bytes / HBM_PEAK),
            "decode_floor_tok_s_real": GEN_B / (step_bytes / HBM_REAL), "params": total}


def timed(fn, steps, warmup, limit_s=60.0):
    for _ in range(warmup):
        fn()
    ts = []
    t_end = time.perf_counter() + limit_s
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if time.perf_counter() > t_end:
            break
    return float(np.median(ts))


def ours_train(lib, s, steps, R):
    rsabi.configure(lib, cuda_matmul=os.environ.get("BENCH_MATMUL", "bf16"))
    m = rsabi.Model(lib, our_cfg(s), seed=1)
    T = s["B"] * s["S"]
    tokens = R.integers(0, s["V"], T).astype(np.int32)
    segs = np.arange(0, T, s["S"], dtype=np.int32)
    mask = np.ones(T, np.uint8)
    mask[segs] = 0
    spec = rsabi.loss_spec(rsabi.LOSS_SFT, float(mask.sum()))

    def step():
        m.train_micro(tokens, segs, mask, spec)
        m.step(lr=1e-5, weight_decay=0.1, max_grad_norm=1.0)

    t = timed(step, steps, 2)
    m.free()
    return T / t, t


def ours_generate(lib, s, R):
    rsabi.configure(lib, cuda_matmul=os.environ.get("BENCH_MATMUL", "bf16"))
    m = rsabi.Model(lib, our_cfg(s), seed=1)
    prompts = [R.integers(0, s["V"], GEN_PROMPT).tolist() for _ in range(GEN_B)]
    m.generate(prompts[:2], 4, temperature=1.0, seed=1)  # warm-up (allocations, cuBLAS, rope table)
    t0 = time.perf_counter()
    m.generate(prompts, 1, temperature=1.0, seed=2)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = m.generate(prompts, GEN_NEW, temperature=1.0, seed=3)
    total = time.perf_counter() - t0
    n = int(out["lengths"].sum())
    m.free()
    decode_rate = (n - GEN_B) / max(total - prefill, 1e-9)
    return n / total, total, decode_rate


def hf_model(s, dtype):
    import transformers
    kw = dict(vocab_size=s["V"], hidden_size=s["D"], intermediate_size=s["I"], num_hidden_layers=s["L"], num_attention_heads=s["H"],
              num_key_value_heads=s["KV"], max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=s["tied"])
    if s["family"] == "qwen2":
        cfg, cls = transformers.Qwen2Config(**kw, rope_theta=1e6, use_sliding_window=False, attn_implementation="sdpa"), transformers.Qwen2ForCausalLM
    else:
        cfg, cls = transformers.LlamaConfig(**kw, rope_theta=1e4, attn_implementation="sdpa"), transformers.LlamaForCausalLM
    with torch.device("cuda"):  # initialise on the GPU (CPU init of 0.5B params takes many seconds)
        model = cls(cfg)
    return model.to(dtype=dtype)


def hf_train(s, steps, R):
    model = hf_model(s, torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1, fused=True)
    ids = torch.tensor(R.integers(0, s["V"], (s["B"], s["S"])), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    t = timed(step, steps, 2)
    del model, opt
    gc.collect()
    torch.cuda.empty_cache()
    return s["B"] * s["S"] / t, t


def hf_generate(s, R):
    model = hf_model(s, torch.bfloat16).eval()
    ids = torch.tensor(R.integers(0, s["V"], (GEN_B, GEN_PROMPT)), device="cuda")
    kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids[:2], max_new_tokens=4, min_new_tokens=4, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
    n = (out.shape[1] - GEN_PROMPT) * GEN_B
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return n / t, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda", default=os.path.join(here, "..", "build", "Release", "librollstream_cuda.so"))
    ap.add_argument("--shapes", default="small,medium,qwen0.5b")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--skip-hf", action="store_true", help="only our side (the issue's reference figures are used for ratios)")
    ap.add_argument("--cublas", default="", help="the libcublas file the CUDA backend loads (rs_settings.cublas_lib)")
    args = ap.parse_args()
    lib = rsabi.load(args.cuda, cublas_lib=args.cublas)
    info = rsabi.info(lib)
    print("backend:", info, "| torch", torch.__version__, "|", torch.cuda.get_device_name(0))
    results = {"backend": json.loads(info), "gpu": torch.cuda.get_device_name(0), "shapes": {}}
    for name in args.shapes.split(","):
        s = SHAPES[name]
        R = np.random.default_rng(0)
        fl = floors(s)
        r = {"floors": fl}
        print(f"\n== {name}: {fl['params'] / 1e6:.1f}M params, train batch {s['B']}x{s['S']}, decode batch {GEN_B} "
              f"({GEN_PROMPT}+{GEN_NEW})", flush=True)
        for key, fn in (("ours_train", lambda: ours_train(lib, s, args.steps, R)), ("ours_generate", lambda: ours_generate(lib, s, R)),
                        ("hf_train", None if args.skip_hf else lambda: hf_train(s, args.steps, R)),
                        ("hf_generate", None if args.skip_hf else lambda: hf_generate(s, R))):
            if fn is None:
                continue
            try:
                t0 = time.perf_counter()
                v = fn()
                r[key] = {"tok_s": v[0], "seconds": v[1]}
                if key == "ours_generate":
                    r[key]["decode_only_tok_s"] = v[2]
                print(f"  {key:<14} {v[0]:>12,.0f} tok/s  ({v[1]:.3f} s{'/step' if 'train' in key else ' total'}; "
                      f"measured in {time.perf_counter() - t0:.0f} s)", flush=True)
            except Exception as e:  # report and go on with the other measurements
                r[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(f"  {key:<14} FAILED: {e}", flush=True)
        for kind in ("train", "generate"):
            ours = r.get(f"ours_{kind}", {}).get("tok_s")
            hf = r.get(f"hf_{kind}", {}).get("tok_s")
            r[f"{kind}_vs_hf"] = ours / hf if ours and hf else None
            r[f"{kind}_vs_issue_ref"] = ours / REF[name][kind] if ours else None
        if r.get("ours_generate", {}).get("tok_s"):
            r["generate_fraction_of_bw_floor"] = r["ours_generate"]["decode_only_tok_s"] / fl["decode_floor_tok_s_real"]
        if r.get("ours_train", {}).get("tok_s"):
            r["train_fraction_of_flop_floor"] = r["ours_train"]["tok_s"] / fl["train_floor_tok_s"]
        results["shapes"][name] = r
        gc.collect()
        torch.cuda.empty_cache()

    print(f"\n{'shape':<10} {'ours train':>12} {'HF train':>12} {'ratio':>6} {'ours gen':>10} {'HF gen':>10} {'ratio':>6} "
          f"{'train floor':>12} {'gen floor':>10}")
    for name, r in results["shapes"].items():
        def f(k):
            return r.get(k, {}).get("tok_s")

        def fmt(v, w, spec=",.0f"):
            return f"{v:>{w}{spec}}" if v else f"{'-':>{w}}"
        print(f"{name:<10} {fmt(f('ours_train'), 12)} {fmt(f('hf_train'), 12)} {fmt(r['train_vs_hf'], 6, '.2f')} "
              f"{fmt(f('ours_generate'), 10)} {fmt(f('hf_generate'), 10)} {fmt(r['generate_vs_hf'], 6, '.2f')} "
              f"{fmt(r['floors']['train_floor_tok_s'], 12)} {fmt(r['floors']['decode_floor_tok_s_real'], 10)}")
    print("(tokens/s; floors: train at 989 TFLOP/s bf16, decode at 3.7 TB/s)")
    print(json.dumps(results, default=lambda x: float(x) if isinstance(x, (np.floating, np.integer)) else str(x)))


if __name__ == "__main__":
    main()

"""The HF architectures of issue 46 against the device's own transformers (python3 + numpy + torch + transformers +
safetensors; no Node). For each of qwen3, qwen3_moe and glm4_moe: a tiny random model built and saved with
transformers' save_pretrained (so config.json and the safetensors names are exactly what transformers writes), our
config read from that config.json the way kernels/hf-config.ts reads it, the weights loaded by name, then on every
backend given (CPU and CUDA):
  - logits of one sequence vs the float64 HF model,
  - the SFT loss (plus the load-balancing loss where output_router_logits is set) vs HF's loss with labels,
  - every parameter's gradient vs HF autograd,
  - 5 AdamW steps (weight decay on matrices only, no clipping): each step's loss and the final params vs
    torch.optim.AdamW on the float64 HF model.
  - generation (greedy, KV cache; MoE routing per decoded token): each step's logits vs the float64 HF model's
    forward over the prompt and the generated tokens,
and, when both backends ran, CUDA vs CPU directly: logits, loss, every gradient, the 5 step losses and final params,
and the greedy tokens. The CUDA backend runs its exact fp32 matmuls here (rs_settings.cuda_matmul fp32), so one set
of tolerances covers both backends. A model a backend does not implement is reported as unsupported, with the
backend's own message, never as a pass. GLM's e_score_correction_bias is a buffer in transformers (no
gradient): ours must be 0 there too.

  python3 hf_arch_check.py --cpu kernels/build/Release/librollstream_cpu.so --cuda kernels/build/Release/librollstream_cuda.so
Prints a table, then `N passed, N failed, N unsupported`; exits 1 when anything failed."""
import argparse
import ctypes as C
import json
import os
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, here)
import rsabi  # noqa: E402

import torch  # noqa: E402

TOL_LOGITS = 1e-4
TOL_GRADS = 1e-3
TOL_STEPS = 1e-3
STEPS = 5
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.1


def nerr(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape or not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


# ----------------------------------------------------------------------------------------------- HF models

def hf_model(arch):
    """(config, model class) of a tiny random model of `arch`, sized so every code path runs."""
    import transformers as tf
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=24, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                  attn_implementation="eager")
    if arch == "qwen3":
        return tf.Qwen3Config(**common), tf.Qwen3ForCausalLM
    if arch == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(**common, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                                decoder_sparse_step=1, mlp_only_layers=[1], output_router_logits=True, router_aux_loss_coef=0.01)
        return cfg, tf.Qwen3MoeForCausalLM
    cfg = tf.Glm4MoeConfig(**common, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=32,
                           first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                           partial_rotary_factor=0.5, use_qk_norm=True, attention_bias=True)
    return cfg, tf.Glm4MoeForCausalLM


def build(arch, seed, folder):
    """Saves a random `arch` model to `folder`; returns (float64 reference, config.json dict, {name: array})."""
    from safetensors.numpy import load_file
    torch.manual_seed(seed)
    cfg, cls = hf_model(arch)
    m = cls(cfg)
    with torch.no_grad():
        for name, prm in m.named_parameters():
            if prm.dim() == 1:
                prm.copy_((1.0 + 0.2 * torch.randn_like(prm)) if "norm" in name else 0.05 * torch.randn_like(prm))
            else:
                prm.mul_(2.5)
        for name, buf in m.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.1 * torch.randn_like(buf))  # a choice that depends on the bias
    m.save_pretrained(folder, safe_serialization=True)
    ref = cls.from_pretrained(folder, torch_dtype=torch.float64, attn_implementation="eager").eval()
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    state = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, fn)))
    return ref, config, {k: v.astype(np.float32) for k, v in state.items()}


# -------------------------------------------------- our config and names (mirrors kernels/hf-config.ts)

class Unsupported(Exception):
    pass


def ours_from_hf(c):
    """rs_model_config fields and per-layer MoE flags for a config.json, as kernels/hf-config.ts maps it."""
    t = c["model_type"]
    if t not in ("qwen3", "qwen3_moe", "glm4_moe"):
        raise Unsupported(f"model_type: {t} is not implemented in rollstream yet")
    rope = c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    head_dim = c.get("head_dim") or (128 if t == "qwen3" else c["hidden_size"] // c["num_attention_heads"])
    glm = t == "glm4_moe"
    ours = dict(rope_theta=float(rope), rms_norm_eps=float(c.get("rms_norm_eps", 1e-5 if glm else 1e-6)), vocab_size=c["vocab_size"],
                hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"], num_layers=c["num_hidden_layers"],
                num_heads=c["num_attention_heads"], num_kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
                max_position_embeddings=c["max_position_embeddings"], tie_word_embeddings=int(bool(c.get("tie_word_embeddings", False))),
                attention_bias=int(bool(glm and c.get("attention_bias"))), threads=0, head_dim=head_dim,
                qk_norm=int(bool(c.get("use_qk_norm"))) if glm else 1)
    L = c["num_hidden_layers"]
    if glm:
        rd = int(head_dim * c.get("partial_rotary_factor", 0.5))
        ours.update(rotary_dim=0 if rd == head_dim else rd, num_experts=c.get("n_routed_experts", 128), num_experts_per_tok=c.get("num_experts_per_tok", 8),
                    moe_intermediate_size=c.get("moe_intermediate_size", 1408), norm_topk_prob=int(bool(c.get("norm_topk_prob", True))),
                    moe_router=1, n_group=c.get("n_group", 1), topk_group=c.get("topk_group", 1),
                    routed_scaling_factor=float(c.get("routed_scaling_factor", 1.0)), n_shared_experts=c.get("n_shared_experts", 1))
        return ours, [0 if l < c.get("first_k_dense_replace", 1) else 1 for l in range(L)]
    layers = None
    if t == "qwen3_moe" and c.get("num_experts", 128) > 0:
        only, step = c.get("mlp_only_layers") or [], c.get("decoder_sparse_step", 1)
        layers = [0 if (l in only or (l + 1) % step) else 1 for l in range(L)]
        ours.update(num_experts=c.get("num_experts", 128), num_experts_per_tok=c.get("num_experts_per_tok", 8),
                    moe_intermediate_size=c.get("moe_intermediate_size", 768), norm_topk_prob=int(bool(c.get("norm_topk_prob", False))),
                    router_aux_loss_coef=float(c.get("router_aux_loss_coef", 0.001)) if c.get("output_router_logits") else 0.0)
    return ours, layers


def per_expert(tensors):
    """Our per-expert names from a state or grad dict that may hold transformers' fused expert tensors
    (mlp.experts.gate_up_proj [E, 2Im, D], mlp.experts.down_proj [E, D, Im]); per-expert names pass through."""
    out = {}
    for k, v in tensors.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            im = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{k[:-len('gate_up_proj')]}{e}.gate_proj.weight"] = v[e, :im]
                out[f"{k[:-len('gate_up_proj')]}{e}.up_proj.weight"] = v[e, im:]
        elif k.endswith("mlp.experts.down_proj"):
            for e in range(v.shape[0]):
                out[f"{k[:-len('down_proj')]}{e}.down_proj.weight"] = v[e]
        else:
            out[k] = v
    return out


# ----------------------------------------------------------------------------------------------- checks

class Report:
    def __init__(self):
        self.rows = []

    def add(self, what, be, err, tol, note=""):
        ok = err <= tol
        self.rows.append((what, be, "PASS" if ok else "FAIL", f"{err:.2e}", f"{tol:.0e}", note))
        print(f"{'PASS' if ok else 'FAIL'}  {be:5s} {what:48s} err {err:.2e} (tol {tol:.0e}) {note}", flush=True)

    def unsupported(self, what, be, why):
        self.rows.append((what, be, "UNSUPPORTED", "", "", why))
        print(f"UNSUPPORTED  {be:5s} {what}: {why}", flush=True)


def hf_loss(ref, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    out = ref(input_ids=ids, labels=ids)
    return out.loss, out.logits[0]


def check_arch(arch, libs, seed, rep):
    with tempfile.TemporaryDirectory() as folder:
        try:
            ref, config, state = build(arch, seed, folder)
        except Exception as e:  # an older transformers without the class, or other kwargs
            rep.unsupported(arch, "hf", f"transformers cannot build it: {type(e).__name__}: {e}")
            return
        try:
            ours, layers = ours_from_hf(config)
        except Unsupported as e:
            rep.unsupported(arch, "all", str(e))
            return
        state = per_expert(state)
        R = np.random.default_rng(seed)
        tokens = R.integers(0, ours["vocab_size"], 48).astype(np.int32)
        got = {}
        # steps() trains the reference in place: every backend starts from the saved weights.
        saved = {k: v.clone() for k, v in ref.state_dict().items()}
        for be, lib in libs:
            ref.load_state_dict(saved)
            r = run_backend(arch, be, lib, ref, ours, layers, state, tokens, rep)
            if r is not None:
                got[be] = r
        if "cpu" in got and "cuda" in got:
            cross_backend(arch, got["cuda"], got["cpu"], rep)


def cross_backend(arch, a, b, rep):
    """CUDA (a) vs CPU (b) on the same weights and tokens: the two backends agree with each other, not only with HF."""
    rep.add(f"{arch} logits cuda vs cpu", "both", nerr(a["logits"], b["logits"]), TOL_LOGITS)
    rep.add(f"{arch} loss cuda vs cpu", "both", abs(a["loss"] - b["loss"]) / abs(b["loss"]), TOL_LOGITS)
    worst, name = 0.0, ""
    for t, g in b["grads"].items():
        e = nerr(a["grads"][t], g)
        if e > worst:
            worst, name = e, t
    rep.add(f"{arch} every gradient cuda vs cpu (worst)", "both", worst, TOL_GRADS, name)
    rep.add(f"{arch} {STEPS} AdamW step losses cuda vs cpu", "both", nerr(a["step_losses"], b["step_losses"]), TOL_STEPS)
    rep.add(f"{arch} {STEPS} AdamW steps: params cuda vs cpu", "both", max(nerr(v, b["params"][k]) for k, v in a["params"].items()), TOL_STEPS)
    same = sum(x == y for x, y in zip(a["generated"], b["generated"]))
    rep.add(f"{arch} greedy generation cuda == cpu", "both", 1.0 - same / len(b["generated"]), 0.25,
            f"{same}/{len(b['generated'])} sequences identical")


def run_backend(arch, be, lib, ref, ours, layers, state, tokens, rep):
    cfg = dict(ours)
    if layers is not None:
        cfg["moe_layers"] = (C.c_uint8 * len(layers))(*layers)
    try:
        m = rsabi.Model(lib, cfg, seed=1)
    except rsabi.KernelError as e:
        if e.code == 3:  # RS_ERR_UNSUPPORTED
            rep.unsupported(arch, be, e.message)
            return
        raise
    m.load_state({t["name"]: state[t["name"]] for t in m.tensors()})
    T = len(tokens)
    ref.zero_grad(set_to_none=True)
    loss, logits = hf_loss(ref, tokens.tolist())
    loss.backward()
    rep.add(f"{arch} logits vs HF", be, nerr(m.forward(tokens, [0]), logits.detach().numpy()), TOL_LOGITS)
    mask = np.ones(T, np.uint8)
    mask[0] = 0
    m.zero_grad()
    stats, _ = m.train_micro(tokens, [0], mask, rsabi.loss_spec(rsabi.LOSS_SFT, float(T - 1)))
    rep.add(f"{arch} loss vs HF (labels{', + aux' if cfg.get('router_aux_loss_coef') else ''})", be,
            abs(stats["loss"] - loss.item()) / abs(loss.item()), TOL_LOGITS)
    hf_grads = per_expert({k: p.grad.numpy() for k, p in ref.named_parameters() if p.grad is not None})
    worst, name = 0.0, ""
    for t, g in m.state(rsabi.GRADS).items():
        e = nerr(g, hf_grads.get(t, np.zeros_like(g)))
        if e > worst:
            worst, name = e, t
    rep.add(f"{arch} every gradient vs HF autograd (worst)", be, worst, TOL_GRADS, name)
    out = {"logits": m.forward(tokens, [0]), "loss": stats["loss"], "grads": m.state(rsabi.GRADS)}
    out["generated"] = generation(arch, be, m, ref, tokens, rep)
    out["step_losses"] = steps(arch, be, m, ref, tokens, mask, rep)
    out["params"] = m.state(rsabi.PARAMS)
    m.free()
    return out


def generation(arch, be, m, ref, tokens, rep):
    """Greedy generation from 3 prompts (KV cache, batched): every step's logits vs HF's forward over prompt + output.
    Returns the generated token lists."""
    prompts = [tokens[:12].tolist(), tokens[5:9].tolist(), tokens[20:41].tolist()]
    res = m.generate(prompts, 8, temperature=0.0, return_logits=True)
    worst = 0.0
    with torch.no_grad():
        for p, toks, steps_logits in zip(prompts, res["tokens"], res["step_logits"]):
            full = torch.tensor([p + toks], dtype=torch.long)
            want = ref(input_ids=full).logits[0, len(p) - 1:len(p) - 1 + len(toks)].numpy()
            worst = max(worst, nerr(steps_logits, want))
    rep.add(f"{arch} generation: step logits vs HF forward", be, worst, TOL_LOGITS)
    return res["tokens"]


def steps(arch, be, m, ref, tokens, mask, rep):
    """STEPS AdamW steps on both sides from the same weights; per-step loss and final params."""
    params = dict(ref.named_parameters())
    decay = [p for n, p in params.items() if p.dim() >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    worst, losses = 0.0, []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss, _ = hf_loss(ref, tokens.tolist())
        loss.backward()
        opt.step()
        m.zero_grad()
        stats, _ = m.train_micro(tokens, [0], mask, rsabi.loss_spec(rsabi.LOSS_SFT, float(len(tokens) - 1)))
        m.step(lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, weight_decay=WD, max_grad_norm=0.0)
        losses.append(stats["loss"])
        worst = max(worst, abs(stats["loss"] - loss.item()) / abs(loss.item()))
    rep.add(f"{arch} {STEPS} AdamW steps: losses vs HF (worst)", be, worst, TOL_STEPS)
    final = per_expert({k: p.detach().numpy() for k, p in params.items()})
    err = max(nerr(v, final[k]) for k, v in m.state(rsabi.PARAMS).items() if k in final)
    rep.add(f"{arch} {STEPS} AdamW steps: params vs torch AdamW", be, err, TOL_STEPS)
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", default=None)
    ap.add_argument("--cuda", default=None)
    ap.add_argument("--cublas", default="")
    ap.add_argument("--arch", nargs="*", default=["qwen3", "qwen3_moe", "glm4_moe"])
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    import transformers
    print(f"seed {seed}; torch {torch.__version__}; transformers {transformers.__version__}", flush=True)
    libs = []
    for be, path in (("cpu", args.cpu), ("cuda", args.cuda)):
        if path and os.path.exists(path):
            lib = rsabi.load(path)
            if be == "cuda":
                # Exact fp32 matmuls, so the CUDA backend is held to the CPU backend's tolerances.
                rsabi.configure(lib, cuda_matmul="fp32", **({"cublas_lib": args.cublas} if args.cublas else {}))
            libs.append((be, lib))
    if not libs:
        print("no backend library given (--cpu / --cuda)")
        return 1
    rep = Report()
    for arch in args.arch:
        try:
            check_arch(arch, libs, seed, rep)
        except Exception as e:  # a broken check must show as a failure, not end the run
            rep.add(f"{arch}: the check itself raised", "all", float("inf"), 0.0, f"{type(e).__name__}: {e}")
    failed = sum(r[2] == "FAIL" for r in rep.rows)
    print(f"{sum(r[2] == 'PASS' for r in rep.rows)} passed, {failed} failed, {sum(r[2] == 'UNSUPPORTED' for r in rep.rows)} unsupported")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

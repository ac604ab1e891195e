/*
 * rollstream kernels: ONE plain C ABI, implemented twice (librollstream_cpu.so now, librollstream_cuda.so
 * later) and loaded at run time by path (the N-API addon dlopen()s it; Python ctypes can too).
 *
 * Rules that keep the ABI stable and language-neutral:
 *   - C only: POD structs, raw pointers, fixed-width integers; no C++ types cross this line.
 *   - Every fallible call returns an int32 status (RS_OK = 0) and, when `err` is not NULL, fills it with a
 *     message naming what is wrong. Nothing here aborts or throws on bad input.
 *   - All tensors are fp32, row-major, contiguous, and owned by the caller unless stated otherwise.
 *   - Linear layers follow HF: y = x W^T + b with W of shape [out, in].
 *   - Determinism: every reduction runs in a fixed order that does not depend on the thread count, so the
 *     same inputs give bit-identical outputs (replay depends on it). The optional BLAS path is deterministic
 *     for a fixed thread count and library, but its bits differ from ours; which products take it is measured
 *     at run time (rs_settings.blas_mode), so a replay pins the routes the run recorded (rs_settings.blas_routes).
 *
 * Model parameter layout (one flat float buffer; grads and both AdamW moments use the same layout):
 *   model.embed_tokens.weight                      [V, D]
 *   for each layer i = 0..L-1:
 *     model.layers.i.input_layernorm.weight        [D]
 *     model.layers.i.self_attn.q_proj.weight       [H*hd, D]
 *     model.layers.i.self_attn.k_proj.weight       [KV*hd, D]
 *     model.layers.i.self_attn.v_proj.weight       [KV*hd, D]
 *     model.layers.i.self_attn.q_proj.bias         [H*hd]      (only when attention_bias)
 *     model.layers.i.self_attn.k_proj.bias         [KV*hd]     (only when attention_bias)
 *     model.layers.i.self_attn.v_proj.bias         [KV*hd]     (only when attention_bias)
 *     model.layers.i.self_attn.o_proj.weight       [D, H*hd]
 *     model.layers.i.self_attn.q_norm.weight       [hd]        (only when qk_norm)
 *     model.layers.i.self_attn.k_norm.weight       [hd]        (only when qk_norm)
 *     model.layers.i.post_attention_layernorm.weight [D]
 *     model.layers.i.mlp.gate_proj.weight          [I, D]      (dense layers)
 *     model.layers.i.mlp.up_proj.weight            [I, D]
 *     model.layers.i.mlp.down_proj.weight          [D, I]
 *     model.layers.i.mlp.gate.weight               [E, D]      (MoE layers: the router, then for e = 0..E-1)
 *     model.layers.i.mlp.gate.e_score_correction_bias [E]      (moe_router 1 only)
 *     model.layers.i.mlp.shared_experts.{gate,up,down}_proj.weight  [Is, D] [Is, D] [D, Is] (n_shared_experts > 0;
 *                                                  Is = moe_intermediate_size * n_shared_experts), then the experts:
 *     model.layers.i.mlp.experts.e.gate_proj.weight [Im, D]
 *     model.layers.i.mlp.experts.e.up_proj.weight  [Im, D]
 *     model.layers.i.mlp.experts.e.down_proj.weight [D, Im]
 *   model.norm.weight                              [D]
 *   lm_head.weight                                 [V, D]      (only when not tie_word_embeddings)
 * with hd = head_dim, or D / H when head_dim is 0. q/k/v (and gate/up) are adjacent so each group runs as one fused matmul. Tensors are packed
 * with no padding; rs_model_tensor_info() reports each one's name, offset and shape.
 */
#ifndef ROLLSTREAM_KERNELS_H
#define ROLLSTREAM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 6: rs_model_shard_optimizer and rs_model_shard_step (ZeRO-1: a learner rank keeps the AdamW moments of its slice).
   5: rs_model_set_lora and rs_model_lora_grads (LoRA dropout as PEFT defines it, a correction on the merged weights).
   4: rs_model_buffer_ranges (partial reads and writes of the flat buffers, for LoRA).
   3: rs_model_config grew (head_dim, qk_norm, the MoE fields, rotary_dim): a caller built for 2 passes a shorter struct;
   rs_model_forward and rs_model_train_micro take seg_parent (group-prefix packing). */
#define RS_ABI_VERSION 6
#define RS_API __attribute__((visibility("default")))

enum rs_status {
  RS_OK = 0,
  RS_ERR_INVALID_ARGUMENT = 1,
  RS_ERR_OUT_OF_MEMORY = 2,
  RS_ERR_UNSUPPORTED = 3,
  RS_ERR_INTERNAL = 4
};

typedef struct rs_error {
  int32_t code;
  char message[512];
} rs_error;

/* ------------------------------------------------------------------------------------------ library */

RS_API int32_t rs_abi_version(void);
/* Writes a one-line JSON object {"device","blas","threads","simd","abi"} into buf (simd: "avx2+fma", plus
 * "+avx512f-sgemm" when our sgemm uses AVX-512); returns RS_OK or
 * RS_ERR_INVALID_ARGUMENT when cap is too small (the CPU line grows with its routing table: retry larger).
 * The CPU backend adds "blas_mode" (auto|off|on), "blas_routes" (how sgemm products are routed, machine-readable:
 * "off", "on", or "nt:2048x256x128:2t=blas,..." per shape class; cpu/gemm_router.h) and "blas_dispatch"
 * (the same in words, with the measured timings). */
RS_API int32_t rs_backend_info(char* buf, int32_t cap);
/* Number of devices this backend can drive (the CPU backend: 1). */
RS_API int32_t rs_device_count(void);
/* Thread count for the stand-alone kernels called from the calling thread (0 = all cores). Model calls use
 * the model's own count. */
RS_API void rs_set_num_threads(int32_t n);

/* ----------------------------------------------------------------------------------------- settings */
/* Everything a caller chooses about how the library runs, passed as arguments: the library reads no environment
 * variable for any of it (the Node side takes the user's knobs from its own config, kernels/native.ts). One
 * struct for both backends: each keeps the other's fields (rs_get_settings returns them) and ignores them. */

enum rs_blas_mode { RS_BLAS_AUTO = 0, RS_BLAS_OFF = 1, RS_BLAS_ON = 2 };
enum rs_cuda_matmul { RS_MATMUL_DEFAULT = 0, RS_MATMUL_FP32 = 1, RS_MATMUL_TF32 = 2, RS_MATMUL_BF16 = 3 };

typedef struct rs_settings {
  /* RS_BLAS_AUTO (default): the CPU backend times our sgemm and OpenBLAS per shape class and routes each class to
   * the faster (cpu/gemm_router.h); the CUDA backend uses cuBLAS when it loads. RS_BLAS_OFF: never BLAS (and never
   * even loaded when set before the library's first use). RS_BLAS_ON: CPU, every product of at least 2^19
   * multiply-adds to OpenBLAS, unmeasured; CUDA, as auto. */
  int32_t blas_mode;
  /* CPU: the OpenBLAS file to dlopen instead of the usual names (libopenblas.so.0, ...); NULL or "" = those.
   * Read at BLAS's first use: changing it afterwards fails with RS_ERR_INVALID_ARGUMENT. */
  const char* blas_lib;
  /* CPU, auto mode: shape classes routed as given instead of measured, as rs_backend_info's "blas_routes" writes
   * them ("nt:2048x256x128:2t=blas,tn:128x128x2048:2t=own"); what replay pins. NULL or "" = measure every class. */
  const char* blas_routes;
  /* CPU: 0 = our sgemm uses the best micro-kernel the CPU has (AVX-512 when available), 1 = AVX2 only. Both give
   * identical bits. */
  int32_t simd_level;
  /* CUDA: how a model created afterwards runs its matmuls (rs_cuda_matmul); RS_MATMUL_DEFAULT = bf16 when cuBLAS
   * loads, else exact fp32 with our own kernels. The stand-alone kernels are always exact fp32. */
  int32_t cuda_matmul;
  /* CUDA: 1 = synchronise after every kernel launch, so a fault inside a kernel is reported with its name. */
  int32_t cuda_sync;
  /* CUDA: the libcublas file to dlopen first; NULL or "" = libcublas.so.13/.12/.11/.so on the loader path.
   * Read at cuBLAS's first use: changing it afterwards fails with RS_ERR_INVALID_ARGUMENT. */
  const char* cublas_lib;
} rs_settings;

/* Replaces all settings at once (the strings are copied). Every field is checked first: on an error nothing
 * changes. Every call forgets the CPU dispatcher's measured routes (and pins blas_routes). A library nobody has
 * configured runs with every field 0 / NULL. */
RS_API int32_t rs_set_settings(const rs_settings* settings, rs_error* err);
/* The settings in force; the strings point into the library and stay valid until the next rs_set_settings. */
RS_API void rs_get_settings(rs_settings* out);

/* TEST ONLY: hooks that make the CPU dispatcher's decisions testable (positive controls). Never called by
 * production code; rs_backend_info's "blas_dispatch" says "TEST HOOKS ACTIVE" while any is set. The CUDA backend
 * accepts and ignores them. */
typedef struct rs_test_hooks {
  /* Load OpenBLAS the first time as if it had detected this core (e.g. "Prescott", a CPU it does not know);
   * NULL or "" = no pretence. Only the library's first load reads it. */
  const char* blas_detected_core;
  /* The dispatcher's timed runs run our sgemm / OpenBLAS this many times each (0 or 1 = once). */
  int32_t slowdown_own;
  int32_t slowdown_blas;
  /* 1 = perturb OpenBLAS's result before the agreement check, so it disagrees with our sgemm. */
  int32_t corrupt_blas;
} rs_test_hooks;

/* Replaces the hooks (strings copied) and, like rs_set_settings, forgets measured routes. */
RS_API int32_t rs_set_test_hooks(const rs_test_hooks* hooks, rs_error* err);

/* ----------------------------------------------------------------------------------- layer kernels */
/* Stand-alone forms of what the model runs, for tests and benchmarks. "accumulate" outputs are added to;
 * the others are overwritten. */

RS_API int32_t rs_embedding_fwd(const float* table, int32_t V, int32_t D, const int32_t* ids, int32_t T,
                                float* out, rs_error* err);
/* dtable[ids[t]] += dout[t] (accumulate; fixed token order). */
RS_API int32_t rs_embedding_bwd(const float* dout, const int32_t* ids, int32_t T, int32_t V, int32_t D,
                                float* dtable, rs_error* err);

/* y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); rstd_out [T] is kept for the backward. */
RS_API int32_t rs_rmsnorm_fwd(const float* x, const float* w, int32_t T, int32_t D, float eps, float* y,
                              float* rstd_out, rs_error* err);
/* dx overwritten; dw accumulated. */
RS_API int32_t rs_rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, int32_t T,
                              int32_t D, float* dx, float* dw, rs_error* err);
/* r = x + residual; y = rmsnorm(r). */
RS_API int32_t rs_residual_rmsnorm_fwd(const float* x, const float* residual, const float* w, int32_t T,
                                       int32_t D, float eps, float* r_out, float* y, float* rstd_out,
                                       rs_error* err);
/* dr = dr_in (may be NULL: the gradient reaching r directly) + rmsnorm backward of dy; written to dx, which
 * is the gradient of both x and residual. dw accumulated. dx may alias dr_in. */
RS_API int32_t rs_residual_rmsnorm_bwd(const float* dy, const float* dr_in, const float* r, const float* w,
                                       const float* rstd, int32_t T, int32_t D, float* dx, float* dw,
                                       rs_error* err);

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major; impl 0 = dispatch (see rs_settings.blas_mode), 1 = our kernel, 2 = BLAS (fails
 * with RS_ERR_UNSUPPORTED when not loaded). */
RS_API int32_t rs_sgemm(int32_t trans_a, int32_t trans_b, int32_t M, int32_t N, int32_t K, float alpha,
                        const float* A, int32_t lda, const float* B, int32_t ldb, float beta, float* C,
                        int32_t ldc, int32_t impl, rs_error* err);
/* y[N,out] = x[N,in] W[out,in]^T + b (b may be NULL). */
RS_API int32_t rs_matmul_fwd(const float* x, const float* W, const float* b, int32_t N, int32_t in_dim,
                             int32_t out_dim, float* y, rs_error* err);
/* dx = dy W (overwrite; NULL to skip); dW += dy^T x (NULL to skip); db += colsum(dy) (NULL to skip). */
RS_API int32_t rs_matmul_bwd(const float* dy, const float* x, const float* W, int32_t N, int32_t in_dim,
                             int32_t out_dim, float* dx, float* dW, float* db, rs_error* err);

/* HF rotate-half RoPE over x [T, n_heads, head_dim]: pairs (i, i + hd/2) rotate by pos * theta^(-2i/hd).
 * positions [T]. y may alias x. The backward applies the inverse rotation. */
RS_API int32_t rs_rope_fwd(const float* x, int32_t T, int32_t n_heads, int32_t head_dim,
                           const int32_t* positions, double theta, float* y, rs_error* err);
RS_API int32_t rs_rope_bwd(const float* dy, int32_t T, int32_t n_heads, int32_t head_dim,
                           const int32_t* positions, double theta, float* dx, rs_error* err);

/* Causal grouped-query attention inside packed segments (no attention across segment boundaries).
 * q [T, H, hd], k/v [T, KV, hd]; query head h reads kv head h / (H/KV); scale 1/sqrt(hd).
 * seg_starts [S]: sorted, first 0. lse_out [T, H] (log-sum-exp of the scaled scores) feeds the backward,
 * which recomputes the probabilities instead of storing them (flash-attention style). */
RS_API int32_t rs_attention_fwd(const float* q, const float* k, const float* v, int32_t T, int32_t H,
                                int32_t KV, int32_t head_dim, const int32_t* seg_starts, int32_t S, float* out,
                                float* lse_out, rs_error* err);
/* dq, dk, dv overwritten. */
RS_API int32_t rs_attention_bwd(const float* dout, const float* q, const float* k, const float* v,
                                const float* out, const float* lse, int32_t T, int32_t H, int32_t KV,
                                int32_t head_dim, const int32_t* seg_starts, int32_t S, float* dq, float* dk,
                                float* dv, rs_error* err);

/* h = silu(gate) * up over n elements. */
RS_API int32_t rs_swiglu_fwd(const float* gate, const float* up, int64_t n, float* h, rs_error* err);
RS_API int32_t rs_swiglu_bwd(const float* dh, const float* gate, const float* up, int64_t n, float* dgate,
                             float* dup, rs_error* err);

/* ------------------------------------------------------------------------------------------- losses */

/* The one C definition of the loss kinds; the per-token math of each is in shared/loss_token.h. Keep
 * RS_LOSS_KIND_COUNT last: the checks accept kinds in [0, RS_LOSS_KIND_COUNT). */
enum rs_loss_kind { RS_LOSS_RL = 0, RS_LOSS_SFT = 1, RS_LOSS_PPO_CLIP = 2, RS_LOSS_DPPO = 3, RS_LOSS_IPO = 4, RS_LOSS_KIND_COUNT };

/* Every loss sums over rows with mask != 0 and divides by `normalizer`. With d = logp - sampler_logp and
 * ratio = exp(d):
 *   RL:       rows with ratio outside [mask_low, mask_high] are masked (no gradient, counted);
 *             loss = -ratio * A + kl_coef * k3,  k3 = exp(d) - d - 1  (KL(sampler || learner) estimator).
 *   SFT:      loss = -logp (advantages, sampler logprobs and ratio masking unused).
 *   PPO_CLIP: loss = -min(ratio * A, clip(ratio, 1 - clip_eps, 1 + clip_eps_high) * A) + kl_coef * k3,
 *             with the same optional ratio masking (mask_low 0, mask_high +inf = off; the defaults of every
 *             loss parameter live in kernels/loss-spec.ts).
 *   DPPO:     a trust region on the token's probability, p = exp(logp), q = exp(sampler_logp): a row is
 *             masked (no policy gradient, counted) when A > 0 and p - q > mask_high, or A <= 0 and
 *             q - p > mask_low; loss = -ratio * A (unmasked rows) + kl_coef * d^2 (every row).
 *   IPO:      the same with a symmetric region: masked when |p - q| > mask_high (mask_low unused). */
typedef struct rs_loss_spec {
  int32_t kind;
  float mask_low;
  float mask_high;
  float clip_eps;
  float clip_eps_high;
  float kl_coef;
  double normalizer;
} rs_loss_spec;

/* Sums over this call's loss rows (mask != 0). loss is already divided by the normalizer. */
typedef struct rs_loss_stats {
  double loss;
  double loss_tokens;    /* rows with mask != 0 */
  double masked_tokens;  /* of those, rows dropped by ratio masking */
  double entropy_sum;    /* entropy of the full softmax, every loss row */
  double mismatch_kl_sum; /* k3 = exp(d) - d - 1, d = logp - sampler_logp, every loss row (0 for SFT) */
  double logp_sum;       /* every loss row */
  double ratio_sum;      /* every loss row (exp(d); 0 for SFT) */
} rs_loss_stats;

/* Fused log-softmax + gather + loss + its gradient over logits [N, V]. Per row: one pass over the vocab in
 * chunks keeps an online max / sum-exp / sum(p*z) (for the entropy), then a second pass writes
 * dlogits = g * (onehot(target) - softmax) chunk by chunk, g = dLoss/dlogp. No probability matrix is kept.
 * dlogits may alias logits (in place) or be NULL (stats only); rows with mask 0 get zero gradient.
 * advantages / sampler_logp may be NULL for SFT. token_logp_out [N] (NULL to skip): 0 on non-loss rows. */
RS_API int32_t rs_loss_fwd_bwd(const float* logits, int32_t N, int32_t V, const int32_t* targets,
                               const uint8_t* mask, const float* advantages, const float* sampler_logp,
                               const rs_loss_spec* spec, float* dlogits, float* token_logp_out,
                               rs_loss_stats* stats, rs_error* err);

/* ---------------------------------------------------------------------------------------- optimizer */

/* sqrt(sum g^2), accumulated in double in fixed-size chunks (thread-count independent). */
RS_API int32_t rs_grad_norm(const float* g, int64_t n, double* out, rs_error* err);
/* PyTorch AdamW on n values, gradient multiplied by grad_scale first (clipping); step >= 1:
 *   m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p *= 1 - lr*wd;
 *   p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps). */
RS_API int32_t rs_adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int64_t step, float grad_scale,
                        rs_error* err);

/* -------------------------------------------------------------------------------------------- model */

typedef struct rs_model_config {
  double rope_theta;
  float rms_norm_eps;
  int32_t vocab_size;
  int32_t hidden_size;
  int32_t intermediate_size;
  int32_t num_layers;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t max_position_embeddings;
  int32_t tie_word_embeddings; /* 0/1 */
  int32_t attention_bias;      /* 0/1: q/k/v biases (Qwen2) */
  int32_t threads;             /* 0 = all cores */
  /* Appended fields (zero = the Llama/Qwen2 behaviour, so a zero-initialised struct keeps its old meaning). */
  int32_t head_dim; /* 0 = hidden_size / num_heads; Qwen3 decouples it (q/k/v widths H*hd, KV*hd) */
  int32_t qk_norm;  /* 0/1: per-head RMSNorm of q and k before RoPE (Qwen3 q_norm / k_norm, weights [hd]) */
  /* Mixture of experts (Qwen3-MoE's sparse block): a router gate [E, D], softmax over the E experts in f32, the
   * top-k picked, their probabilities renormalised to sum 1 when norm_topk_prob, each a SwiGLU MLP of width
   * moe_intermediate_size; the block's output is the probability-weighted sum of the k experts' outputs. */
  int32_t num_experts;           /* 0 = a dense MLP in every layer */
  int32_t num_experts_per_tok;   /* k, in [1, num_experts] */
  int32_t moe_intermediate_size;
  int32_t norm_topk_prob;        /* 0/1 */
  /* Switch-Transformer load-balancing loss (transformers' load_balancing_loss_func over all MoE layers of a
   * packed row) times this coefficient, weighted by the row's loss tokens / normalizer, added to the loss;
   * 0 = none. */
  float router_aux_loss_coef;
  const uint8_t* moe_layers; /* [num_layers]: 1 = sparse MoE block, 0 = dense MLP; NULL = every layer. Read by
                              * rs_model_create only. */
  /* GLM-4-MoE (DeepSeek-V3 routing): moe_router 1 = sigmoid scores; the choice adds a correction bias
   * (mlp.gate.e_score_correction_bias [E], never trained) and keeps the topk_group of n_group expert groups with the
   * best sum of their two best scores; the picks' weights are their sigmoid scores, renormalised (+1e-20) when
   * norm_topk_prob, times routed_scaling_factor. moe_router 0 = softmax top-k (Qwen3-MoE). */
  int32_t moe_router;
  int32_t n_group;               /* 0 or 1 = no groups */
  int32_t topk_group;
  float routed_scaling_factor;   /* 0 = 1 */
  int32_t n_shared_experts;      /* a shared SwiGLU MLP of width moe_intermediate_size * n on every token (0 = none) */
  int32_t rotary_dim;            /* RoPE on the first rotary_dim dims of each head (partial_rotary_factor); 0 = head_dim */
} rs_model_config;

typedef struct rs_model rs_model;

typedef struct rs_tensor_info {
  char name[128];
  int64_t offset; /* in floats, into the flat buffers */
  int64_t size;
  int32_t ndim;
  int32_t weight_decay; /* 1 for matrices (AdamW decays them), 0 for norms and biases */
  int64_t shape[2];
} rs_tensor_info;

/* Params: matrices ~ normal(0, 0.02) (o_proj, down_proj scaled by 1/sqrt(2 L)), norms 1, biases 0, from a
 * counter-based RNG keyed by (seed, flat index): deterministic and independent of threads. */
RS_API rs_model* rs_model_create(const rs_model_config* cfg, uint64_t seed, rs_error* err);
RS_API void rs_model_free(rs_model* model);
RS_API int64_t rs_model_num_params(const rs_model* model);
RS_API int32_t rs_model_num_tensors(const rs_model* model);
RS_API int32_t rs_model_tensor_info(const rs_model* model, int32_t index, rs_tensor_info* out, rs_error* err);
RS_API int32_t rs_model_threads(const rs_model* model);
/* Threads for this model's later calls (CPU: the OpenMP team of its kernels; CUDA: host-side sampling);
 * 0 = all cores. A learner that shares the machine with inference during RL runs on fewer threads than
 * during SFT. Our own kernels give the same bits on any thread count (BLAS libraries may not). */
RS_API int32_t rs_model_set_threads(rs_model* model, int32_t threads, rs_error* err);
/* The model's flat buffers (num_params floats each), owned by the model; read or write them directly.
 * A pointer reflects the buffer as of the call that returned it: on the CUDA backend the data lives on
 * the GPU and this host copy is refreshed on each call, so call the getter again after any model call
 * (and before writing) rather than keeping the pointer. */
RS_API float* rs_model_params(rs_model* model);
RS_API float* rs_model_grads(rs_model* model);
RS_API float* rs_model_adam_m(rs_model* model);
RS_API float* rs_model_adam_v(rs_model* model);
/* Copies n ranges of one flat buffer (kind: 0 params, 1 grads, 2 AdamW m, 3 AdamW v) to or from `values`, where the
 * ranges lie back to back in the order given: range i is [offsets[i], offsets[i] + sizes[i]). write = 1: values ->
 * buffer; write = 0: buffer -> values. Only these ranges move, so a LoRA step writes the adapted tensors' merged
 * weights and reads their gradients without the whole model (on the CUDA backend: without a full upload or
 * download). Every range must lie inside the buffer; n = 0 does nothing. */
RS_API int32_t rs_model_buffer_ranges(rs_model* model, int32_t kind, int32_t write, const int64_t* offsets, const int64_t* sizes,
                                      int32_t n, float* values, rs_error* err);
/* LoRA dropout (PEFT's lora_dropout: y = W0 x + scale * B A drop(x), drop independent per adapted module, per token
 * and per input element, kept values scaled by 1 / (1 - dropout)). The model keeps the merged weights W0 + scale * B A,
 * so the train micro-batches add the correction scale * B A (drop(x) - x) to each adapted projection's output, and
 * their backward adds its gradient to x and accumulates the correction's part of dA and dB into the model's LoRA
 * gradient buffer (read by rs_model_lora_grads; rs_model_zero_grad zeroes it). The whole adapters' gradient is then
 * scale * B^T G + dA_corr, scale * G A^T + dB_corr, with G the merged weight's gradient. Only rs_model_train_micro
 * applies it (forward, generation and the engine serve the merged weights: PEFT's eval mode). The mask of module k,
 * token t (position in the packed row), input element j is mix64(seed, k, t, j) (kernels/shared/lora_dropout.h). */
typedef struct rs_lora_target {
  int64_t weight_offset;  /* the adapted weight [out, in] in the flat params: one of a layer's q/k/v/o/gate/up/down */
  int64_t a_offset;       /* A [rank, in] in `adapters` */
  int64_t b_offset;       /* B [out, rank] in `adapters` */
} rs_lora_target;

typedef struct rs_lora_spec {
  int32_t n_targets;      /* 0: no correction (the default) */
  int32_t rank;
  float scale;            /* alpha / rank (or alpha / sqrt(rank)) */
  float dropout;          /* [0, 1); 0: no correction */
  uint64_t seed;          /* the masks of the following micro-batches */
  const rs_lora_target* targets;
  const float* adapters;  /* copied; n_adapters floats */
  int64_t n_adapters;
} rs_lora_spec;

/* Sets the LoRA dropout of the following rs_model_train_micro calls (copies targets and adapters). The LoRA gradient
 * buffer (n_adapters floats) is kept across calls with the same n_adapters and zeroed when it changes. The CUDA
 * backend refuses dropout > 0 (RS_ERR_UNSUPPORTED). */
RS_API int32_t rs_model_set_lora(rs_model* model, const rs_lora_spec* spec, rs_error* err);
/* Copies the accumulated LoRA correction gradient (n = the spec's n_adapters floats) into out. */
RS_API int32_t rs_model_lora_grads(rs_model* model, float* out, int64_t n, rs_error* err);
RS_API int64_t rs_model_step_count(const rs_model* model);
RS_API void rs_model_set_step_count(rs_model* model, int64_t step);

/* A packed row: tokens [T] in S segments starting at seg_starts [S] (sorted, first 0). seg_parent [S] (NULL = every
 * segment a root) is group-prefix packing: -1 for a root, which attends causally within itself from position 0;
 * else the index p of an earlier root that the segment continues. A child attends to all of its parent's tokens and
 * then causally within itself, at positions continuing from the parent's length: exactly the row "parent + child"
 * computed alone, with the parent's tokens laid out (and computed) once for all its children. The children of a
 * parent follow it contiguously; parent + child must fit max_position_embeddings. */

/* logits_out [T, V]: row t is the next-token distribution after tokens[t] within its segment (and parent). */
RS_API int32_t rs_model_forward(rs_model* model, const int32_t* tokens, int32_t T, const int32_t* seg_starts,
                                int32_t S, const int32_t* seg_parent, float* logits_out, rs_error* err);

/* Forward + backward of one packed row, ACCUMULATING into the grads. Per-token arrays are indexed by the
 * token being predicted: loss_mask[t] = 1 trains tokens[t] from the tokens before it in its segment and its
 * parent (0 at a root segment's start; a child's first token is predicted by its parent's last token);
 * advantages / sampler_logp may be NULL for SFT. token_logp_out [T] may be NULL. */
RS_API int32_t rs_model_train_micro(rs_model* model, const int32_t* tokens, int32_t T,
                                    const int32_t* seg_starts, int32_t S, const int32_t* seg_parent, const uint8_t* loss_mask,
                                    const float* advantages, const float* sampler_logp,
                                    const rs_loss_spec* spec, rs_loss_stats* stats, float* token_logp_out,
                                    rs_error* err);

typedef struct rs_optim_config {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  /* matrices only */
  float max_grad_norm; /* <= 0: no clipping */
} rs_optim_config;

typedef struct rs_step_result {
  double grad_norm; /* before clipping */
  int32_t clipped;
  int32_t skipped;  /* 1 when the norm was not finite: params untouched, step not counted */
  int64_t step;     /* optimizer steps taken so far */
} rs_step_result;

/* Global-norm clip + AdamW + zero grads. Refused (RS_ERR_INVALID_ARGUMENT) while the moments are sharded. */
RS_API int32_t rs_model_step(rs_model* model, const rs_optim_config* opt, rs_step_result* out, rs_error* err);

/* ZeRO-1 (data-parallel learner ranks, kernels/zero1.ts): the model keeps the AdamW moments of the flat slice
 * [offset, offset + count) only, so N ranks hold 1/N of the optimizer state each. The slice's current moments are
 * kept; the rest are freed. After it, rs_model_adam_m / _v point at the slice (count floats) and
 * rs_model_buffer_ranges kinds 2 and 3 take flat offsets inside it. offset 0, count num_params: the whole state
 * again (the moments outside the old slice start at zero). */
RS_API int32_t rs_model_shard_optimizer(rs_model* model, int64_t offset, int64_t count, rs_error* err);
RS_API void rs_model_optimizer_shard(const rs_model* model, int64_t* offset, int64_t* count);
/* The ZeRO-1 step of a rank: grads[offset, offset + count) hold the gradient of the slice summed over the ranks (the
 * caller's reduce-scatter put it there) and grad_norm is the global norm over every rank's slice (the caller's
 * all-reduce). Clips by grad_norm as rs_model_step does, AdamW on params[offset, offset + count) with the slice's
 * moments, zero grads; the other params are untouched (the caller's all-gather fills them). A non-finite grad_norm
 * skips the step (skipped = 1), as rs_model_step does. */
RS_API int32_t rs_model_shard_step(rs_model* model, const rs_optim_config* opt, double grad_norm, rs_step_result* out, rs_error* err);
RS_API void rs_model_zero_grad(rs_model* model);

enum rs_stop_reason { RS_STOP_EOS = 0, RS_STOP_SEQUENCE = 1, RS_STOP_LENGTH = 2, RS_STOP_CONTEXT = 3 };

typedef struct rs_generate_config {
  int32_t max_new_tokens;
  float temperature; /* 0 = greedy */
  float top_p;       /* (0, 1]; 1 = off */
  int32_t top_k;     /* 0 = off */
  uint64_t seed;
  const int32_t* eos_ids; /* n_eos ids, any of which ends a sequence (kept in its output) */
  int32_t n_eos;
  const int32_t* stop_flat;    /* stop sequences, concatenated */
  const int32_t* stop_offsets; /* n_stop + 1 offsets into stop_flat */
  int32_t n_stop;
  int32_t return_logits; /* 1: fill out->step_logits (tests) */
  int32_t vocab_limit;   /* > 0: only ids < vocab_limit can be drawn (logits past it are -inf before sampling,
                            so logprobs and policy_logprobs are normalised over [0, vocab_limit)): for a
                            checkpoint whose embedding is padded past its tokenizer. 0 = the whole vocab. */
} rs_generate_config;

/* Caller-allocated outputs, one slot of max_new_tokens per prompt (prompt i's tokens at
 * i * max_new_tokens). logprobs: log-probability of the sampled token under the distribution actually
 * sampled from (after temperature, top-k, top-p and renormalisation; 0 for greedy); policy_logprobs: under
 * the untempered model (log_softmax of the raw logits). step_logits: [n, max_new_tokens, V], may be NULL. */
typedef struct rs_generate_output {
  int32_t* tokens;
  float* logprobs;
  float* policy_logprobs;
  int32_t* lengths;
  int32_t* stop_reasons;
  float* step_logits;
} rs_generate_output;

/* KV-cache decoding of a ragged batch: packed prefill of the prompts, then batched decode steps from which
 * finished sequences drop out. Sequence i draws its k-th token with a uniform from a counter-based RNG keyed
 * by (seeds[i] when seeds is not NULL, else a hash of (cfg->seed, i)) and k, and runs only row-independent
 * kernels (never BLAS), so its output does not depend on the other prompts in the batch or on the thread
 * count. A prompt must be 1..max_position_embeddings tokens; a sequence stops with CONTEXT once it holds
 * max_position_embeddings tokens (every token stays trainable).
 * prompts_flat / prompt_offsets (n + 1): the prompts concatenated. */
RS_API int32_t rs_model_generate(rs_model* model, const int32_t* prompts_flat, const int64_t* prompt_offsets,
                                 int32_t n_prompts, const uint64_t* seeds, const rs_generate_config* cfg,
                                 rs_generate_output* out, rs_error* err);

/* ------------------------------------------------------------------------------------------- engine */
/* Step-level generation (continuous batching) over one model: sequences join and leave at any step, and their KV
 * lives in fixed-size blocks drawn from one pool, so memory is bounded by the tokens in flight (n_blocks *
 * block_size), not by batch x context.
 *
 * Each call of rs_engine_step runs ONE forward over: one row for every running sequence that is decoding, plus
 * prompt rows of sequences being prefilled (at most max_prefill_tokens per step, a long prompt split over several
 * steps), then samples one token for every sequence whose rows reached its last token.
 *
 * Sharing. Full blocks are cached by content: a chain hash of (previous block, cache namespace, the block's
 * tokens), verified exactly on a hit (tokens, namespace and the parent block instance), so a prompt whose leading
 * blocks another sequence computed (a multi-turn continuation, a repeated prompt) skips them. The namespace is the
 * request's cache_salt AND the weights version the block was computed under: a block computed under version v is
 * never read by a sequence running under another version (unless cache_across_versions). The n_samples completions
 * of one rs_engine_add are prefilled once and share every prompt block, the partial last one included; a sequence
 * copies a shared block before writing into it (copy-on-write). Idle cached blocks stay until the pool needs them
 * (least recently released first).
 *
 * Scheduling. First come, first served: a waiting sequence is admitted only when the pool can hold its whole
 * prompt (never over-committing memory) and max_seqs allows; otherwise it and everything after it wait. When a
 * running sequence needs a block and none is free, the most recently admitted sequences are preempted: their
 * blocks are released (full ones stay cached) and they go back to the front of the queue, to be prefilled again
 * (recompute) when admitted.
 *
 * Determinism. A sequence's tokens and logprobs are bitwise those of running it alone with the same seed, whatever
 * else is in the batch, whenever it arrived, however its prompt was split into chunks, shared, or recomputed after
 * preemption: every kernel is row-independent (never BLAS), every position's KV is computed by the same arithmetic
 * whether it was a prompt row or a decoded row, and token k of a sequence is drawn with a counter-based uniform
 * keyed by (its seed, k). The thread count does not matter either.
 *
 * An engine holds its model: the model must outlive it, and no other call may use the model during an engine call.
 * An engine is not thread-safe. The CUDA backend declares these calls and refuses them (RS_ERR_UNSUPPORTED). */

typedef struct rs_engine rs_engine;

typedef struct rs_engine_config {
  int32_t block_size;         /* tokens per KV block; 0 = 16 */
  int32_t n_blocks;           /* blocks in the pool (>= 1): the KV memory is n_blocks * block_size tokens */
  int32_t max_seqs;           /* sequences running at once (the n_samples of a group count one each); 0 = 256 */
  int32_t max_prefill_tokens; /* prompt rows computed per step, over all sequences; 0 = 4096 */
  /* 0 (default): cached blocks are shared only between sequences under the same weights version. 1: also across
   * versions (a sequence may then read KV computed under older weights: off-policy KV, the caller must record it). */
  int32_t cache_across_versions;
} rs_engine_config;

/* One prompt and how to sample n_samples completions of it. The arrays are copied by rs_engine_add. */
typedef struct rs_engine_request {
  const int32_t* prompt;
  int32_t n_prompt;       /* 1..max_position_embeddings */
  int32_t n_samples;      /* completions of this prompt, 1..max_seqs: prefilled once, blocks shared copy-on-write */
  const uint64_t* seeds;  /* n_samples RNG keys: completion i draws its k-th token with uniform(seeds[i], k) */
  int32_t max_new_tokens;
  float temperature;      /* 0 = greedy */
  float top_p;            /* (0, 1]; 1 = off */
  int32_t top_k;          /* 0 = off */
  int32_t vocab_limit;    /* > 0: only ids < vocab_limit can be drawn (as rs_generate_config.vocab_limit) */
  const int32_t* eos_ids; /* ends a completion (kept in its output) */
  int32_t n_eos;
  const int32_t* stop_flat;    /* stop sequences, concatenated */
  const int32_t* stop_offsets; /* n_stop + 1 offsets into stop_flat */
  int32_t n_stop;
  uint64_t cache_salt;    /* blocks are shared only between requests with the same salt (0 = the common cache) */
} rs_engine_request;

/* The engine writes at most max_seqs tokens and max_seqs finishes per step: size tokens_cap and finished_cap
 * at least max_seqs. */
typedef struct rs_engine_token {
  int64_t seq_id;
  int32_t index;          /* k: the k-th generated token of its sequence (0-based) */
  int32_t token;
  float logprob;          /* under the distribution sampled from (rs_generate_output.logprobs) */
  float policy_logprob;   /* under the untempered model */
  int64_t version;        /* the weights version it was sampled under (rs_engine_set_version) */
} rs_engine_token;

/* stop_reason RS_STOP_*; a sequence that finishes is forgotten by the engine (its id becomes unknown). */
typedef struct rs_engine_finish {
  int64_t seq_id;
  int32_t stop_reason;
  int32_t n_tokens;       /* tokens it generated in all */
} rs_engine_finish;

typedef struct rs_engine_step_output {
  rs_engine_token* tokens;
  int32_t tokens_cap;
  int32_t n_tokens;        /* out */
  rs_engine_finish* finished;
  int32_t finished_cap;
  int32_t n_finished;      /* out */
  float* logits;           /* NULL, or tokens_cap * vocab_size floats: row i = the logits tokens[i] was drawn from */
  int32_t prefill_rows;    /* out: prompt (or recomputed) rows this step computed */
  int32_t decode_rows;     /* out: decode rows this step computed */
} rs_engine_step_output;

typedef struct rs_engine_stats {
  int64_t version;
  int32_t blocks_total;
  int32_t blocks_used;            /* held by sequences */
  int32_t blocks_cached_idle;     /* held by nobody, kept for prefix hits until the pool needs them */
  int32_t blocks_free;            /* used + cached_idle + free = total */
  int32_t running;                /* sequences admitted (completions waiting for their group's prefill included) */
  int32_t waiting;
  int64_t steps;
  int64_t prefill_rows;           /* rows computed for prompts and recomputation, all steps */
  int64_t decode_rows;
  int64_t prompt_tokens;          /* tokens of every admitted prompt (what prefilling without any sharing costs) */
  int64_t prefix_hit_tokens;      /* of those, found in the cache at admission */
  int64_t shared_prompt_tokens;   /* of those, shared from the first completion of their group */
  int64_t preemptions;
  int64_t cow_copies;
  int64_t tokens_generated;
} rs_engine_stats;

RS_API rs_engine* rs_engine_create(rs_model* model, const rs_engine_config* cfg, rs_error* err);
RS_API void rs_engine_free(rs_engine* engine);
/* Queues n_samples completions of a prompt; fills seq_ids_out [n_samples] with their ids (never reused). A prompt
 * of max_position_embeddings tokens, or max_new_tokens 0, finishes at the next step with no tokens (CONTEXT /
 * LENGTH). Refused (RS_ERR_INVALID_ARGUMENT) when one completion could not fit in the pool alone. */
RS_API int32_t rs_engine_add(rs_engine* engine, const rs_engine_request* req, int64_t* seq_ids_out, rs_error* err);
/* Ends a sequence now, without a finish record: its blocks are released (full ones stay cached). Cancelling the
 * first completion of a group still being prefilled hands the prefill to the next one. */
RS_API int32_t rs_engine_cancel(rs_engine* engine, int64_t seq_id, rs_error* err);

enum rs_engine_update { RS_ENGINE_UPDATE_KEEP = 0, RS_ENGINE_UPDATE_RECOMPUTE = 1 };
/* Tells the engine the model's weights changed (call it after writing them, between steps). Later tokens carry
 * `version`. KEEP: running sequences go on with the KV they have (computed under older weights); their blocks are
 * never shared from then on. RECOMPUTE: running sequences drop their KV and are prefilled again (prompt and the
 * tokens generated so far) under the new weights, their tokens so far unchanged. Idle cached blocks of other
 * versions are forgotten (unless cache_across_versions). */
RS_API int32_t rs_engine_set_version(rs_engine* engine, int64_t version, int32_t mode, rs_error* err);
/* One scheduling step and one forward (see above). With nothing to do it returns RS_OK with no tokens. */
RS_API int32_t rs_engine_step(rs_engine* engine, rs_engine_step_output* out, rs_error* err);
RS_API int32_t rs_engine_get_stats(const rs_engine* engine, rs_engine_stats* out, rs_error* err);

#ifdef __cplusplus
}
#endif

#endif /* ROLLSTREAM_KERNELS_H */

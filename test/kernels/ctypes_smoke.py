"""The CPU backend through Python ctypes (no C++ in the ABI): create a model, run a forward pass and a training
micro-batch, and check that bad input comes back as a status code with a message, not a crash.
Usage: python3 ctypes_smoke.py /path/to/librollstream_cpu.so"""
import ctypes as C
import math
import sys

lib = C.CDLL(sys.argv[1])


class Error(C.Structure):
    _fields_ = [("code", C.c_int32), ("message", C.c_char * 512)]


class Config(C.Structure):
    _fields_ = [("rope_theta", C.c_double), ("rms_norm_eps", C.c_float)] + [
        (n, C.c_int32)
        for n in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                  "max_position_embeddings", "tie_word_embeddings", "attention_bias", "threads", "head_dim", "qk_norm",
                  "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")
    ] + [("router_aux_loss_coef", C.c_float), ("moe_layers", C.POINTER(C.c_uint8)), ("moe_router", C.c_int32), ("n_group", C.c_int32),
         ("topk_group", C.c_int32), ("routed_scaling_factor", C.c_float), ("n_shared_experts", C.c_int32), ("rotary_dim", C.c_int32)]


class LossSpec(C.Structure):
    _fields_ = [("kind", C.c_int32), ("mask_low", C.c_float), ("mask_high", C.c_float), ("clip_eps", C.c_float),
                ("clip_eps_high", C.c_float), ("kl_coef", C.c_float), ("normalizer", C.c_double)]


class LossStats(C.Structure):
    _fields_ = [(n, C.c_double) for n in ("loss", "loss_tokens", "masked_tokens", "entropy_sum", "mismatch_kl_sum", "logp_sum", "ratio_sum")]


lib.rs_model_create.restype = C.c_void_p
lib.rs_model_create.argtypes = [C.POINTER(Config), C.c_uint64, C.POINTER(Error)]
lib.rs_model_free.argtypes = [C.c_void_p]
lib.rs_model_num_params.restype = C.c_int64
lib.rs_model_num_params.argtypes = [C.c_void_p]
I32P, F32P, U8P = C.POINTER(C.c_int32), C.POINTER(C.c_float), C.POINTER(C.c_uint8)
lib.rs_model_forward.argtypes = [C.c_void_p, I32P, C.c_int32, I32P, C.c_int32, I32P, F32P, C.POINTER(Error)]
lib.rs_model_train_micro.argtypes = [C.c_void_p, I32P, C.c_int32, I32P, C.c_int32, I32P, U8P, F32P, F32P, C.POINTER(LossSpec),
                                     C.POINTER(LossStats), F32P, C.POINTER(Error)]



class Settings(C.Structure):
    _fields_ = [("blas_mode", C.c_int32), ("blas_lib", C.c_char_p), ("blas_routes", C.c_char_p), ("simd_level", C.c_int32),
                ("cuda_matmul", C.c_int32), ("cuda_sync", C.c_int32), ("cublas_lib", C.c_char_p)]


lib.rs_set_settings.argtypes = [C.POINTER(Settings), C.POINTER(Error)]
lib.rs_get_settings.argtypes = [C.POINTER(Settings)]
lib.rs_get_settings.restype = None

assert lib.rs_abi_version() == 6
# Settings are arguments: BLAS off before its first use (never loaded), our sgemm's AVX2 kernel; read back and reported.
err = Error()
assert lib.rs_set_settings(C.byref(Settings(blas_mode=1, simd_level=1)), C.byref(err)) == 0, err.message
got = Settings()
lib.rs_get_settings(C.byref(got))
assert got.blas_mode == 1 and got.simd_level == 1 and got.blas_lib == b"", (got.blas_mode, got.simd_level, got.blas_lib)
info = C.create_string_buffer(8192)
assert lib.rs_backend_info(info, 8192) == 0
assert b'"blas":"none (blas_mode off: never loaded)"' in info.value and b'"simd":"avx2+fma"' in info.value, info.value
err = Error()
bad = Config(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=18, intermediate_size=24, num_layers=2, num_heads=4,
             num_kv_heads=2, max_position_embeddings=32, tie_word_embeddings=1, attention_bias=0, threads=1)
assert lib.rs_model_create(C.byref(bad), 1, C.byref(err)) is None and b"not divisible by numHeads" in err.message, err.message
cfg = Config(rope_theta=1e4, rms_norm_eps=1e-5, vocab_size=37, hidden_size=16, intermediate_size=24, num_layers=2, num_heads=4,
             num_kv_heads=2, max_position_embeddings=32, tie_word_embeddings=1, attention_bias=1, threads=1)
m = lib.rs_model_create(C.byref(cfg), 1, C.byref(err))
assert m, err.message
tokens = (C.c_int32 * 6)(1, 2, 3, 4, 5, 6)
segs = (C.c_int32 * 2)(0, 3)
logits = (C.c_float * (6 * 37))()
assert lib.rs_model_forward(m, tokens, 6, segs, 2, None, logits, C.byref(err)) == 0, err.message
assert all(math.isfinite(x) for x in logits)
mask = (C.c_uint8 * 6)(0, 1, 1, 0, 1, 1)
spec = LossSpec(kind=1, mask_low=0, mask_high=1e30, normalizer=4)
stats = LossStats()
assert lib.rs_model_train_micro(m, tokens, 6, segs, 2, None, mask, None, None, C.byref(spec), C.byref(stats), None, C.byref(err)) == 0, err.message
assert stats.loss_tokens == 4 and abs(stats.loss - math.log(37)) < 0.1, (stats.loss_tokens, stats.loss)
tokens[2] = 99
assert lib.rs_model_forward(m, tokens, 6, segs, 2, None, logits, C.byref(err)) == 1
assert b"token id 99 at index 2 is outside the vocab [0, 37)" in err.message, err.message
# Partial buffer access (ABI 4): two ranges of the grads read back to back, one range of the params written.
I64P = C.POINTER(C.c_int64)
lib.rs_model_buffer_ranges.argtypes = [C.c_void_p, C.c_int32, C.c_int32, I64P, I64P, C.c_int32, F32P, C.POINTER(Error)]
lib.rs_model_grads.argtypes = lib.rs_model_params.argtypes = [C.c_void_p]
lib.rs_model_grads.restype = lib.rs_model_params.restype = F32P
off, size, vals = (C.c_int64 * 2)(40, 7), (C.c_int64 * 2)(3, 2), (C.c_float * 5)()
assert lib.rs_model_buffer_ranges(m, 1, 0, off, size, 2, vals, C.byref(err)) == 0, err.message
g = lib.rs_model_grads(m)
assert list(vals) == [g[40], g[41], g[42], g[7], g[8]] and any(v != 0 for v in vals), list(vals)
one = (C.c_float * 3)(1.5, -2.0, 3.25)
assert lib.rs_model_buffer_ranges(m, 0, 1, off, size, 1, one, C.byref(err)) == 0, err.message
p = lib.rs_model_params(m)
assert [p[40], p[41], p[42]] == [1.5, -2.0, 3.25]
n = lib.rs_model_num_params(m)
off[0] = n - 1
assert lib.rs_model_buffer_ranges(m, 0, 1, off, size, 1, one, C.byref(err)) == 1 and b"outside the buffer" in err.message, err.message
# LoRA dropout (ABI 5): one adapted q_proj (layer 0, at 608 = embed 37x16 + input norm 16), rank 4, A at 0, B at 64.
class LoraTarget(C.Structure):
    _fields_ = [("weight_offset", C.c_int64), ("a_offset", C.c_int64), ("b_offset", C.c_int64)]


class LoraSpec(C.Structure):
    _fields_ = [("n_targets", C.c_int32), ("rank", C.c_int32), ("scale", C.c_float), ("dropout", C.c_float), ("seed", C.c_uint64),
                ("targets", C.POINTER(LoraTarget)), ("adapters", F32P), ("n_adapters", C.c_int64)]


lib.rs_model_set_lora.argtypes = [C.c_void_p, C.POINTER(LoraSpec), C.POINTER(Error)]
lib.rs_model_lora_grads.argtypes = [C.c_void_p, F32P, C.c_int64, C.POINTER(Error)]
lib.rs_model_zero_grad.argtypes = [C.c_void_p]
lib.rs_model_zero_grad.restype = None
adapters = (C.c_float * 128)(*[0.1 * ((i * 7) % 5 - 2) for i in range(128)])
target = LoraTarget(608, 0, 64)
lspec = LoraSpec(1, 4, 2.0, 0.5, 42, C.pointer(target), adapters, 128)
assert lib.rs_model_set_lora(m, C.byref(lspec), C.byref(err)) == 0, err.message
tokens[2] = 3
assert lib.rs_model_train_micro(m, tokens, 6, segs, 2, None, mask, None, None, C.byref(spec), C.byref(stats), None, C.byref(err)) == 0, err.message
lg = (C.c_float * 128)()
assert lib.rs_model_lora_grads(m, lg, 128, C.byref(err)) == 0, err.message
assert any(v != 0 for v in lg[:64]) and any(v != 0 for v in lg[64:]), "the correction has a gradient for A and for B"
lib.rs_model_zero_grad(m)
assert lib.rs_model_lora_grads(m, lg, 128, C.byref(err)) == 0 and all(v == 0 for v in lg), "zero_grad zeroes it"
target.weight_offset = 0  # the embedding: not a projection
assert lib.rs_model_set_lora(m, C.byref(lspec), C.byref(err)) == 1 and b"not a dense q/k/v/o/gate/up/down projection" in err.message, err.message
lspec.dropout = 1.0
assert lib.rs_model_set_lora(m, C.byref(lspec), C.byref(err)) == 1 and b"dropout must be in [0, 1)" in err.message, err.message
lib.rs_model_free(m)
print("ctypes ok:", info.value.decode())

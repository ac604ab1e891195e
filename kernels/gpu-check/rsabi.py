"""ctypes bindings for the rollstream kernels C ABI (kernels/kernels.h), shared by check.py, bench.py and the
tests. Pure ctypes + numpy: loads librollstream_cpu.so or librollstream_cuda.so alike.

test_abi_signatures.py parses kernels.h and compares every struct and function here with it, so a change of
the header that is not mirrored here fails a test instead of corrupting memory at run time."""
import ctypes as C
import os

import numpy as np

ABI_VERSION = 6


class Error(C.Structure):
    _fields_ = [("code", C.c_int32), ("message", C.c_char * 512)]


class Settings(C.Structure):
    _fields_ = [("blas_mode", C.c_int32), ("blas_lib", C.c_char_p), ("blas_routes", C.c_char_p), ("simd_level", C.c_int32),
                ("cuda_matmul", C.c_int32), ("cuda_sync", C.c_int32), ("cublas_lib", C.c_char_p)]


class TestHooks(C.Structure):
    _fields_ = [("blas_detected_core", C.c_char_p), ("slowdown_own", C.c_int32), ("slowdown_blas", C.c_int32),
                ("corrupt_blas", C.c_int32)]


class LossSpec(C.Structure):
    _fields_ = [("kind", C.c_int32), ("mask_low", C.c_float), ("mask_high", C.c_float), ("clip_eps", C.c_float),
                ("clip_eps_high", C.c_float), ("kl_coef", C.c_float), ("normalizer", C.c_double)]


class LossStats(C.Structure):
    _fields_ = [(n, C.c_double) for n in ("loss", "loss_tokens", "masked_tokens", "entropy_sum", "mismatch_kl_sum", "logp_sum",
                                          "ratio_sum")]


class ModelConfig(C.Structure):
    _fields_ = [("rope_theta", C.c_double), ("rms_norm_eps", C.c_float)] + [
        (n, C.c_int32)
        for n in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                  "max_position_embeddings", "tie_word_embeddings", "attention_bias", "threads", "head_dim", "qk_norm",
                  "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")
    ] + [("router_aux_loss_coef", C.c_float), ("moe_layers", C.POINTER(C.c_uint8)), ("moe_router", C.c_int32), ("n_group", C.c_int32),
         ("topk_group", C.c_int32), ("routed_scaling_factor", C.c_float), ("n_shared_experts", C.c_int32), ("rotary_dim", C.c_int32)]


class TensorInfo(C.Structure):
    _fields_ = [("name", C.c_char * 128), ("offset", C.c_int64), ("size", C.c_int64), ("ndim", C.c_int32),
                ("weight_decay", C.c_int32), ("shape", C.c_int64 * 2)]


class OptimConfig(C.Structure):
    _fields_ = [(n, C.c_float) for n in ("lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm")]


class StepResult(C.Structure):
    _fields_ = [("grad_norm", C.c_double), ("clipped", C.c_int32), ("skipped", C.c_int32), ("step", C.c_int64)]


I32P, I64P, U64P = C.POINTER(C.c_int32), C.POINTER(C.c_int64), C.POINTER(C.c_uint64)
F32P, F64P, U8P = C.POINTER(C.c_float), C.POINTER(C.c_double), C.POINTER(C.c_uint8)
ERRP = C.POINTER(Error)
MODEL = C.c_void_p


class LoraTarget(C.Structure):
    _fields_ = [("weight_offset", C.c_int64), ("a_offset", C.c_int64), ("b_offset", C.c_int64)]


class LoraSpec(C.Structure):
    _fields_ = [("n_targets", C.c_int32), ("rank", C.c_int32), ("scale", C.c_float), ("dropout", C.c_float), ("seed", C.c_uint64),
                ("targets", C.POINTER(LoraTarget)), ("adapters", F32P), ("n_adapters", C.c_int64)]


class GenerateConfig(C.Structure):
    _fields_ = [("max_new_tokens", C.c_int32), ("temperature", C.c_float), ("top_p", C.c_float), ("top_k", C.c_int32),
                ("seed", C.c_uint64), ("eos_ids", I32P), ("n_eos", C.c_int32), ("stop_flat", I32P), ("stop_offsets", I32P),
                ("n_stop", C.c_int32), ("return_logits", C.c_int32),
                ("vocab_limit", C.c_int32)]


class GenerateOutput(C.Structure):
    _fields_ = [("tokens", I32P), ("logprobs", F32P), ("policy_logprobs", F32P), ("lengths", I32P), ("stop_reasons", I32P),
                ("step_logits", F32P)]


ENGINE = C.c_void_p


class EngineConfig(C.Structure):
    _fields_ = [(n, C.c_int32) for n in ("block_size", "n_blocks", "max_seqs", "max_prefill_tokens", "cache_across_versions")]


class EngineRequest(C.Structure):
    _fields_ = [("prompt", I32P), ("n_prompt", C.c_int32), ("n_samples", C.c_int32), ("seeds", U64P), ("max_new_tokens", C.c_int32),
                ("temperature", C.c_float), ("top_p", C.c_float), ("top_k", C.c_int32), ("vocab_limit", C.c_int32), ("eos_ids", I32P),
                ("n_eos", C.c_int32), ("stop_flat", I32P), ("stop_offsets", I32P), ("n_stop", C.c_int32), ("cache_salt", C.c_uint64)]


class EngineToken(C.Structure):
    _fields_ = [("seq_id", C.c_int64), ("index", C.c_int32), ("token", C.c_int32), ("logprob", C.c_float), ("policy_logprob", C.c_float),
                ("version", C.c_int64)]


class EngineFinish(C.Structure):
    _fields_ = [("seq_id", C.c_int64), ("stop_reason", C.c_int32), ("n_tokens", C.c_int32)]


class EngineStepOutput(C.Structure):
    _fields_ = [("tokens", C.POINTER(EngineToken)), ("tokens_cap", C.c_int32), ("n_tokens", C.c_int32), ("finished", C.POINTER(EngineFinish)),
                ("finished_cap", C.c_int32), ("n_finished", C.c_int32), ("logits", F32P), ("prefill_rows", C.c_int32),
                ("decode_rows", C.c_int32)]


class EngineStats(C.Structure):
    _fields_ = ([("version", C.c_int64)] + [(n, C.c_int32) for n in ("blocks_total", "blocks_used", "blocks_cached_idle", "blocks_free",
                                                                      "running", "waiting")] +
                [(n, C.c_int64) for n in ("steps", "prefill_rows", "decode_rows", "prompt_tokens", "prefix_hit_tokens",
                                          "shared_prompt_tokens", "preemptions", "cow_copies", "tokens_generated")])


# name -> (restype, argtypes), in kernels.h order.
SIGNATURES = {
    "rs_abi_version": (C.c_int32, []),
    "rs_backend_info": (C.c_int32, [C.c_char_p, C.c_int32]),
    "rs_device_count": (C.c_int32, []),
    "rs_set_num_threads": (None, [C.c_int32]),
    "rs_set_settings": (C.c_int32, [C.POINTER(Settings), ERRP]),
    "rs_get_settings": (None, [C.POINTER(Settings)]),
    "rs_set_test_hooks": (C.c_int32, [C.POINTER(TestHooks), ERRP]),
    "rs_embedding_fwd": (C.c_int32, [F32P, C.c_int32, C.c_int32, I32P, C.c_int32, F32P, ERRP]),
    "rs_embedding_bwd": (C.c_int32, [F32P, I32P, C.c_int32, C.c_int32, C.c_int32, F32P, ERRP]),
    "rs_rmsnorm_fwd": (C.c_int32, [F32P, F32P, C.c_int32, C.c_int32, C.c_float, F32P, F32P, ERRP]),
    "rs_rmsnorm_bwd": (C.c_int32, [F32P, F32P, F32P, F32P, C.c_int32, C.c_int32, F32P, F32P, ERRP]),
    "rs_residual_rmsnorm_fwd": (C.c_int32, [F32P, F32P, F32P, C.c_int32, C.c_int32, C.c_float, F32P, F32P, F32P, ERRP]),
    "rs_residual_rmsnorm_bwd": (C.c_int32, [F32P, F32P, F32P, F32P, F32P, C.c_int32, C.c_int32, F32P, F32P, ERRP]),
    "rs_sgemm": (C.c_int32, [C.c_int32, C.c_int32, C.c_int32, C.c_int32, C.c_int32, C.c_float, F32P, C.c_int32, F32P, C.c_int32,
                             C.c_float, F32P, C.c_int32, C.c_int32, ERRP]),
    "rs_matmul_fwd": (C.c_int32, [F32P, F32P, F32P, C.c_int32, C.c_int32, C.c_int32, F32P, ERRP]),
    "rs_matmul_bwd": (C.c_int32, [F32P, F32P, F32P, C.c_int32, C.c_int32, C.c_int32, F32P, F32P, F32P, ERRP]),
    "rs_rope_fwd": (C.c_int32, [F32P, C.c_int32, C.c_int32, C.c_int32, I32P, C.c_double, F32P, ERRP]),
    "rs_rope_bwd": (C.c_int32, [F32P, C.c_int32, C.c_int32, C.c_int32, I32P, C.c_double, F32P, ERRP]),
    "rs_attention_fwd": (C.c_int32, [F32P, F32P, F32P, C.c_int32, C.c_int32, C.c_int32, C.c_int32, I32P, C.c_int32, F32P, F32P, ERRP]),
    "rs_attention_bwd": (C.c_int32, [F32P, F32P, F32P, F32P, F32P, F32P, C.c_int32, C.c_int32, C.c_int32, C.c_int32, I32P, C.c_int32,
                                     F32P, F32P, F32P, ERRP]),
    "rs_swiglu_fwd": (C.c_int32, [F32P, F32P, C.c_int64, F32P, ERRP]),
    "rs_swiglu_bwd": (C.c_int32, [F32P, F32P, F32P, C.c_int64, F32P, F32P, ERRP]),
    "rs_loss_fwd_bwd": (C.c_int32, [F32P, C.c_int32, C.c_int32, I32P, U8P, F32P, F32P, C.POINTER(LossSpec), F32P, F32P,
                                    C.POINTER(LossStats), ERRP]),
    "rs_grad_norm": (C.c_int32, [F32P, C.c_int64, F64P, ERRP]),
    "rs_adamw": (C.c_int32, [F32P, F32P, F32P, F32P, C.c_int64, C.c_float, C.c_float, C.c_float, C.c_float, C.c_float, C.c_int64,
                             C.c_float, ERRP]),
    "rs_model_create": (MODEL, [C.POINTER(ModelConfig), C.c_uint64, ERRP]),
    "rs_model_free": (None, [MODEL]),
    "rs_model_num_params": (C.c_int64, [MODEL]),
    "rs_model_num_tensors": (C.c_int32, [MODEL]),
    "rs_model_tensor_info": (C.c_int32, [MODEL, C.c_int32, C.POINTER(TensorInfo), ERRP]),
    "rs_model_threads": (C.c_int32, [MODEL]),
    "rs_model_set_threads": (C.c_int32, [MODEL, C.c_int32, ERRP]),
    "rs_model_params": (F32P, [MODEL]),
    "rs_model_grads": (F32P, [MODEL]),
    "rs_model_adam_m": (F32P, [MODEL]),
    "rs_model_adam_v": (F32P, [MODEL]),
    "rs_model_buffer_ranges": (C.c_int32, [MODEL, C.c_int32, C.c_int32, I64P, I64P, C.c_int32, F32P, ERRP]),
    "rs_model_set_lora": (C.c_int32, [MODEL, C.POINTER(LoraSpec), ERRP]),
    "rs_model_lora_grads": (C.c_int32, [MODEL, F32P, C.c_int64, ERRP]),
    "rs_model_step_count": (C.c_int64, [MODEL]),
    "rs_model_set_step_count": (None, [MODEL, C.c_int64]),
    "rs_model_forward": (C.c_int32, [MODEL, I32P, C.c_int32, I32P, C.c_int32, I32P, F32P, ERRP]),
    "rs_model_train_micro": (C.c_int32, [MODEL, I32P, C.c_int32, I32P, C.c_int32, I32P, U8P, F32P, F32P, C.POINTER(LossSpec),
                                         C.POINTER(LossStats), F32P, ERRP]),
    "rs_model_step": (C.c_int32, [MODEL, C.POINTER(OptimConfig), C.POINTER(StepResult), ERRP]),
    "rs_model_shard_optimizer": (C.c_int32, [MODEL, C.c_int64, C.c_int64, ERRP]),
    "rs_model_optimizer_shard": (None, [MODEL, C.POINTER(C.c_int64), C.POINTER(C.c_int64)]),
    "rs_model_shard_step": (C.c_int32, [MODEL, C.POINTER(OptimConfig), C.c_double, C.POINTER(StepResult), ERRP]),
    "rs_model_zero_grad": (None, [MODEL]),
    "rs_model_generate": (C.c_int32, [MODEL, I32P, I64P, C.c_int32, U64P, C.POINTER(GenerateConfig), C.POINTER(GenerateOutput), ERRP]),
    "rs_engine_create": (ENGINE, [MODEL, C.POINTER(EngineConfig), ERRP]),
    "rs_engine_free": (None, [ENGINE]),
    "rs_engine_add": (C.c_int32, [ENGINE, C.POINTER(EngineRequest), I64P, ERRP]),
    "rs_engine_cancel": (C.c_int32, [ENGINE, C.c_int64, ERRP]),
    "rs_engine_set_version": (C.c_int32, [ENGINE, C.c_int64, C.c_int32, ERRP]),
    "rs_engine_step": (C.c_int32, [ENGINE, C.POINTER(EngineStepOutput), ERRP]),
    "rs_engine_get_stats": (C.c_int32, [ENGINE, C.POINTER(EngineStats), ERRP]),
}

STRUCTS = {"rs_error": Error, "rs_settings": Settings, "rs_test_hooks": TestHooks, "rs_loss_spec": LossSpec, "rs_loss_stats": LossStats, "rs_model_config": ModelConfig,
           "rs_tensor_info": TensorInfo, "rs_lora_target": LoraTarget, "rs_lora_spec": LoraSpec, "rs_optim_config": OptimConfig, "rs_step_result": StepResult,
           "rs_generate_config": GenerateConfig, "rs_generate_output": GenerateOutput, "rs_engine_config": EngineConfig,
           "rs_engine_request": EngineRequest, "rs_engine_token": EngineToken, "rs_engine_finish": EngineFinish,
           "rs_engine_step_output": EngineStepOutput, "rs_engine_stats": EngineStats}
ENGINE_UPDATE_KEEP, ENGINE_UPDATE_RECOMPUTE = 0, 1

BLAS_AUTO, BLAS_OFF, BLAS_ON = 0, 1, 2
MATMUL = {None: 0, "fp32": 1, "tf32": 2, "bf16": 3}  # rs_cuda_matmul; None = the default
LOSS_RL, LOSS_SFT, LOSS_PPO_CLIP, LOSS_DPPO, LOSS_IPO = 0, 1, 2, 3, 4
STOP_EOS, STOP_SEQUENCE, STOP_LENGTH, STOP_CONTEXT = 0, 1, 2, 3


class KernelError(RuntimeError):
    def __init__(self, fn, code, message):
        super().__init__(f"{fn} failed (status {code}): {message}")
        self.fn, self.code, self.message = fn, code, message


def load(path, **settings):
    """Opens a backend library, declares every ABI function on it and, when given, sets rs_settings fields (see
    configure). The library reads no environment variable: its settings are these arguments."""
    lib = C.CDLL(os.path.abspath(path))
    for name, (res, args) in SIGNATURES.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    abi = lib.rs_abi_version()
    if abi != ABI_VERSION:
        raise RuntimeError(f"{path}: ABI version {abi}, these bindings expect {ABI_VERSION}")
    if settings:
        configure(lib, **settings)
    return lib


def settings(lib):
    """The rs_settings in force, as a dict of the field names (strings decoded)."""
    s = Settings()
    lib.rs_get_settings(C.byref(s))
    return {n: (v.decode() if isinstance(v, bytes) else "" if v is None and t is C.c_char_p else v)
            for n, t in Settings._fields_ for v in [getattr(s, n)]}


def configure(lib, **changes):
    """Changes the given rs_settings fields (names as in kernels.h; cuda_matmul may be "fp32"/"tf32"/"bf16"/None, the
    strings str), keeping the others; raises KernelError with the library's message when it refuses."""
    cur = settings(lib)
    unknown = set(changes) - set(cur)
    if unknown:
        raise TypeError(f"unknown rs_settings fields: {sorted(unknown)}")
    if "cuda_matmul" in changes and not isinstance(changes["cuda_matmul"], int):
        changes["cuda_matmul"] = MATMUL[changes["cuda_matmul"]]
    cur.update(changes)
    s = Settings(**{n: (cur[n].encode() if t is C.c_char_p else int(cur[n])) for n, t in Settings._fields_})
    call("rs_set_settings", lib.rs_set_settings, C.byref(s))


def info(lib):
    buf = C.create_string_buffer(65536)  # the CPU line grows with its sgemm routing table
    if lib.rs_backend_info(buf, len(buf)) != 0:
        raise RuntimeError("rs_backend_info: buffer too small")
    return buf.value.decode()


# ---- numpy <-> pointer helpers (arrays must stay alive for the call; they are C-contiguous copies of the right dtype)

def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def i32(a):
    return np.ascontiguousarray(a, dtype=np.int32)


def ptr(a, kind):
    """Pointer of type kind (F32P, I32P, ...) to a numpy array, or None for None."""
    if a is None:
        return None
    return a.ctypes.data_as(kind)


def call(fn_name, fn, *args):
    """Calls an ABI function whose last argument is rs_error*; raises KernelError on a non-zero status."""
    err = Error()
    status = fn(*args, C.byref(err))
    if status != 0:
        raise KernelError(fn_name, status, err.message.decode(errors="replace"))
    return status


PARAMS, GRADS, ADAM_M, ADAM_V = 0, 1, 2, 3


class Model:
    """An rs_model with numpy in and out. cfg: dict with the rs_model_config field names."""

    def __init__(self, lib, cfg, seed=1):
        self.lib = lib
        self.cfg = dict(cfg)
        c = ModelConfig(**{k: v for k, v in cfg.items()})
        err = Error()
        self.h = lib.rs_model_create(C.byref(c), seed, C.byref(err))
        if not self.h:
            raise KernelError("rs_model_create", err.code, err.message.decode(errors="replace"))
        self.n = lib.rs_model_num_params(self.h)
        self.V = cfg["vocab_size"]

    def free(self):
        if self.h:
            self.lib.rs_model_free(self.h)
            self.h = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def tensors(self):
        out = []
        for i in range(self.lib.rs_model_num_tensors(self.h)):
            t = TensorInfo()
            call("rs_model_tensor_info", self.lib.rs_model_tensor_info, self.h, i, C.byref(t))
            out.append({"name": t.name.decode(), "offset": t.offset, "size": t.size, "shape": tuple(t.shape[:t.ndim]),
                        "weight_decay": bool(t.weight_decay)})
        return out

    def _buf(self, kind):
        getter = (self.lib.rs_model_params, self.lib.rs_model_grads, self.lib.rs_model_adam_m, self.lib.rs_model_adam_v)[kind]
        p = getter(self.h)
        if not p:
            raise RuntimeError("model buffer getter returned NULL (see stderr)")
        return np.ctypeslib.as_array(p, shape=(self.n,))

    def read(self, kind=PARAMS):
        """A copy of a flat buffer (the getter is called each time: the CUDA backend syncs its host mirror there)."""
        return self._buf(kind).copy()

    def write(self, kind, values):
        values = f32(values)
        assert values.shape == (self.n,), (values.shape, self.n)
        self._buf(kind)[:] = values

    def load_state(self, state):
        """state: {tensor name: array}; every tensor of the layout must be present (tied heads are skipped)."""
        flat = self.read(PARAMS)
        for t in self.tensors():
            a = np.asarray(state[t["name"]], dtype=np.float32).reshape(-1)
            assert a.size == t["size"], (t["name"], a.size, t["size"])
            flat[t["offset"]:t["offset"] + t["size"]] = a
        self.write(PARAMS, flat)

    def state(self, kind=PARAMS):
        flat = self.read(kind)
        return {t["name"]: flat[t["offset"]:t["offset"] + t["size"]].reshape(t["shape"]) for t in self.tensors()}

    def forward(self, tokens, segs, parents=None):
        tokens, segs = i32(tokens), i32(segs)
        parents = None if parents is None else i32(parents)
        out = np.empty((tokens.size, self.V), dtype=np.float32)
        call("rs_model_forward", self.lib.rs_model_forward, self.h, ptr(tokens, I32P), tokens.size, ptr(segs, I32P), segs.size,
             ptr(parents, I32P), ptr(out, F32P))
        return out

    def train_micro(self, tokens, segs, mask, spec, adv=None, slp=None, parents=None):
        tokens, segs = i32(tokens), i32(segs)
        parents = None if parents is None else i32(parents)
        mask = np.ascontiguousarray(mask, dtype=np.uint8)
        adv = None if adv is None else f32(adv)
        slp = None if slp is None else f32(slp)
        stats = LossStats()
        lp = np.zeros(tokens.size, dtype=np.float32)
        call("rs_model_train_micro", self.lib.rs_model_train_micro, self.h, ptr(tokens, I32P), tokens.size, ptr(segs, I32P), segs.size,
             ptr(parents, I32P), ptr(mask, U8P), ptr(adv, F32P), ptr(slp, F32P), C.byref(spec), C.byref(stats), ptr(lp, F32P))
        return {n: getattr(stats, n) for n, _ in LossStats._fields_}, lp

    def step(self, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, max_grad_norm=0.0):
        o = OptimConfig(lr, beta1, beta2, eps, weight_decay, max_grad_norm)
        r = StepResult()
        call("rs_model_step", self.lib.rs_model_step, self.h, C.byref(o), C.byref(r))
        return {"grad_norm": r.grad_norm, "clipped": r.clipped, "skipped": r.skipped, "step": r.step}

    def zero_grad(self):
        self.lib.rs_model_zero_grad(self.h)

    def shard_optimizer(self, offset, count):
        """ZeRO-1: the model keeps the AdamW moments of [offset, offset + count) only (read them with buffer ranges)."""
        call("rs_model_shard_optimizer", self.lib.rs_model_shard_optimizer, self.h, offset, count)

    def shard_step(self, grad_norm, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, max_grad_norm=0.0):
        o = OptimConfig(lr, beta1, beta2, eps, weight_decay, max_grad_norm)
        r = StepResult()
        call("rs_model_shard_step", self.lib.rs_model_shard_step, self.h, C.byref(o), grad_norm, C.byref(r))
        return {"grad_norm": r.grad_norm, "clipped": r.clipped, "skipped": r.skipped, "step": r.step}

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, seed=0, seeds=None, eos=(), stops=(),
                 return_logits=False, vocab_limit=0):
        n = len(prompts)
        flat = i32(np.concatenate([np.asarray(p, dtype=np.int32) for p in prompts]))
        off = np.zeros(n + 1, dtype=np.int64)
        off[1:] = np.cumsum([len(p) for p in prompts])
        eos_a = i32(list(eos)) if len(eos) else None
        stop_flat = i32(np.concatenate([np.asarray(s, dtype=np.int32) for s in stops])) if len(stops) else None
        stop_off = i32(np.concatenate([[0], np.cumsum([len(s) for s in stops])])) if len(stops) else None
        cfg = GenerateConfig(max_new_tokens, temperature, top_p, top_k, seed, ptr(eos_a, I32P), len(eos), ptr(stop_flat, I32P),
                             ptr(stop_off, I32P), len(stops), 1 if return_logits else 0, vocab_limit)
        m = max(1, max_new_tokens)
        toks = np.zeros((n, m), dtype=np.int32)
        lps = np.zeros((n, m), dtype=np.float32)
        plps = np.zeros((n, m), dtype=np.float32)
        lens = np.zeros(n, dtype=np.int32)
        reasons = np.zeros(n, dtype=np.int32)
        logits = np.zeros((n, m, self.V), dtype=np.float32) if return_logits else None
        out = GenerateOutput(ptr(toks, I32P), ptr(lps, F32P), ptr(plps, F32P), ptr(lens, I32P), ptr(reasons, I32P), ptr(logits, F32P))
        seeds_a = None if seeds is None else np.ascontiguousarray(seeds, dtype=np.uint64)
        call("rs_model_generate", self.lib.rs_model_generate, self.h, ptr(flat, I32P), ptr(off, I64P), n, ptr(seeds_a, U64P),
             C.byref(cfg), C.byref(out))
        res = {"tokens": [toks[i, :lens[i]].tolist() for i in range(n)], "logprobs": [lps[i, :lens[i]] for i in range(n)],
               "policy_logprobs": [plps[i, :lens[i]] for i in range(n)], "lengths": lens, "stop_reasons": reasons}
        if return_logits:
            res["step_logits"] = [logits[i, :lens[i]] for i in range(n)]
        return res


class Engine:
    """An rs_engine over a Model: add requests, step, read tokens per sequence (kernels.h, rs_engine_*)."""

    def __init__(self, model, n_blocks, block_size=16, max_seqs=64, max_prefill_tokens=0, cache_across_versions=0):
        self.lib, self.model, self.max_seqs = model.lib, model, max_seqs
        c = EngineConfig(block_size, n_blocks, max_seqs, max_prefill_tokens, cache_across_versions)
        err = Error()
        self.h = self.lib.rs_engine_create(model.h, C.byref(c), C.byref(err))
        if not self.h:
            raise KernelError("rs_engine_create", err.code, err.message.decode(errors="replace"))
        self.toks = (EngineToken * max_seqs)()
        self.fin = (EngineFinish * max_seqs)()
        self.seqs = {}  # id -> {"tokens", "logprobs", "policy_logprobs", "stop_reason"}

    def free(self):
        if self.h:
            self.lib.rs_engine_free(self.h)
            self.h = None

    def add(self, prompt, seeds, max_new_tokens, temperature=1.0, top_p=1.0, top_k=0):
        p = i32(prompt)
        sd = np.ascontiguousarray(seeds, dtype=np.uint64)
        r = EngineRequest(ptr(p, I32P), len(p), len(sd), ptr(sd, U64P), max_new_tokens, temperature, top_p, top_k, 0, None, 0, None, None,
                          0, 0)
        ids = np.zeros(len(sd), dtype=np.int64)
        call("rs_engine_add", self.lib.rs_engine_add, self.h, C.byref(r), ptr(ids, I64P))
        for i in ids.tolist():
            self.seqs[i] = {"tokens": [], "logprobs": [], "policy_logprobs": [], "stop_reason": None}
        return ids.tolist()

    def step(self):
        out = EngineStepOutput(self.toks, self.max_seqs, 0, self.fin, self.max_seqs, 0, None, 0, 0)
        call("rs_engine_step", self.lib.rs_engine_step, self.h, C.byref(out))
        for t in self.toks[:out.n_tokens]:
            q = self.seqs[t.seq_id]
            q["tokens"].append(t.token)
            q["logprobs"].append(t.logprob)
            q["policy_logprobs"].append(t.policy_logprob)
        for f in self.fin[:out.n_finished]:
            self.seqs[f.seq_id]["stop_reason"] = f.stop_reason
        return out.n_tokens + out.n_finished + out.prefill_rows

    def stats(self):
        st = EngineStats()
        call("rs_engine_get_stats", self.lib.rs_engine_get_stats, self.h, C.byref(st))
        return {f: getattr(st, f) for f, _ in EngineStats._fields_}

    def drain(self):
        while any(q["stop_reason"] is None for q in self.seqs.values()):
            if not self.step():
                raise RuntimeError("the engine made no progress")
        return self.seqs


def loss_spec(kind, normalizer, mask_low=0.0, mask_high=float("inf"), clip_eps=0.2, clip_eps_high=0.2, kl_coef=0.0):
    return LossSpec(kind, mask_low, mask_high, clip_eps, clip_eps_high, kl_coef, normalizer)

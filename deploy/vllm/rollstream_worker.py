# A vLLM worker extension that reloads full weights in place from an HF safetensors folder: what rollstream's
# fleet writes under weights.exportDir for each policy version (config.json + model.safetensors, or shards listed by
# model.safetensors.index.json). vLLM mixes this class into every worker when started with
# `--worker-extension-cls rollstream_worker.RollstreamWorkerExtension` (serve.py in this folder sets it), and the API
# server reaches each worker's copy through `engine_client.collective_rpc(<method name>, args=(folder,))`.
#
# Invariant: the architecture and shapes are the running model's; only tensor values change. The folder's tensors
# go through the model's own `load_weights` (the same name mapping, stacking of q/k/v and gate/up, and tensor-
# parallel slicing that vLLM applies when it first loads a checkpoint), so a folder `vllm serve` could start from
# is a folder this reloads. The prefix cache is the API server's job (serve.py resets it after every worker
# answered); the workers only hold the parameters.
#
# Written from upstream sources, no code copied:
#   vllm-project/vllm vllm/v1/worker/worker_base.py @0243225 (WorkerWrapperBase.init_worker: the extension is
#     appended to the worker class's bases, and any attribute it shares with the worker class is refused, hence
#     the rollstream_ prefix; `self.model_runner` is set by the worker), vllm/v1/worker/gpu_worker.py @0012cf6
#     (`self.model_runner.model` is the nn.Module the worker runs), vllm/v1/engine/async_llm.py @00080ee
#     (`collective_rpc(method, timeout, args, kwargs)` returns one result per worker; the worker class already has
#     `update_weights` / `start_weight_update` / `finish_weight_update` for upstream's transfer engines).
#   PrimeIntellect-ai/prime-rl src/prime_rl/inference/vllm/worker/filesystem.py @559b447 (the same job through
#     vLLM's private model-loader iterator and layerwise reload; this file reads the folder with the safetensors
#     package instead, which vLLM itself depends on, so no private vLLM function is called).
#
# **Untested against a real vLLM here**: no GPU build of vLLM can run where rollstream's tests run. The test suite
# (test/deploy/vllm-extension.test.ts) compiles this file, checks the method name serve.py calls, and runs
# safetensors_files on folders (one the fleet's exporter wrote, a sharded one); the loading itself never ran.
# Targets vLLM's v1 engine (the files above are from its main branch, 2026); the extension mechanism dates from
# vLLM 0.8, so older v1 releases should work too, unverified.

import json
import os
from collections.abc import Iterator

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def safetensors_files(folder: str) -> list[str]:
    """The folder's weight files: the shards its index names, else model.safetensors, else every *.safetensors."""
    index = os.path.join(folder, INDEX)
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map") or {}
        names = sorted(set(weight_map.values()))
        if not names:
            raise ValueError(f"{index}: weight_map is empty")
    elif os.path.isfile(os.path.join(folder, SINGLE)):
        names = [SINGLE]
    else:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not names:
        raise FileNotFoundError(f"{folder}: no {SINGLE}, {INDEX} or *.safetensors (write the checkpoint before the update)")
    paths = [os.path.join(folder, n) for n in names]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"{folder}: the index names shards that are not there: {', '.join(missing)}")
    return paths


def folder_tensors(paths: list[str]) -> Iterator[tuple[str, "object"]]:
    """(name, tensor) for every tensor of the files, read on the CPU one at a time (the loader copies each into
    its parameter, so at most one tensor beyond the model is held)."""
    from safetensors import safe_open

    for path in paths:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


class RollstreamWorkerExtension:
    """Mixed into vLLM's worker class; `self` is the worker, so `self.model_runner` is vLLM's."""

    def rollstream_load_weights_from_dir(self, weight_dir: str) -> int:
        """Loads every tensor of the HF folder into the running model; returns how many tensors it read."""
        import torch

        paths = safetensors_files(weight_dir)
        model = self.model_runner.model
        # Compiled or CUDA-graph wrappers keep the module they run under `runnable`; the weights live there.
        model = getattr(model, "runnable", model)
        count = 0

        def counted() -> Iterator[tuple[str, "object"]]:
            nonlocal count
            for item in folder_tensors(paths):
                count += 1
                yield item

        with torch.no_grad():
            model.load_weights(weights=counted())
        if count == 0:
            raise ValueError(f"{weight_dir}: the safetensors files hold no tensors")
        return count

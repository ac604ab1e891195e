# Starts vLLM's OpenAI-compatible server with the routes rollstream's vLLM client (actors/inference/fleet/vllm.ts,
# VllmServer.loadWeights) calls around a full-weight update and that upstream vLLM lacks:
#   POST /pause?mode=abort|wait|keep, then POST /update_weights {weight_dir}, then POST /update_weight_version
#   {new_version} (a 404 is accepted: the server then reports no version labels), then POST /resume.
# The reload is forwarded to every worker with `collective_rpc` and runs in rollstream_worker.py (this folder), which
# this launcher names as vLLM's worker extension unless --worker-extension-cls names another (which then needs the
# same method, WORKER_METHOD). Everything else is `vllm serve`'s: same arguments, same routes.
#
#   PYTHONPATH=deploy/vllm python3 deploy/vllm/serve.py --model <model folder> --port 8000 --logprobs-mode processed_logprobs
#
# ROUTES is the one table of what this adds; the test suite reads it (test/deploy/vllm-extension.test.ts) and
# checks it against the requests the TypeScript client sends, so keep it a plain literal. A row marked
# "if_absent" is added only when the app has no route with that method and path: with VLLM_SERVER_DEV_MODE=1
# upstream serves /pause, /resume and /update_weight_version itself (vllm serve/dev/rlhf/api_router.py) and those
# are kept. The weights row is always ours and is put first, so it wins over dev mode's own /update_weights (a
# different body, {update_info}, for upstream's transfer engines, which rollstream does not use).
#
# Written from upstream sources, no code copied: vllm-project/vllm vllm/entrypoints/openai/api_server.py @0001948
# (run_server -> build_and_serve calls the module's build_app(args, supported_tasks, model_config) and sets
# app.state.engine_client in init_app_state), vllm/entrypoints/openai/cli_args.py @0052233 (make_arg_parser; its
# optional model_tag positional is copied to --model by `vllm serve`, so here too), vllm/engine/protocol.py @007d500 and vllm/v1/engine/async_llm.py
# @00080ee (EngineClient.collective_rpc, reset_prefix_cache, pause_generation with `mode` since vllm PR #32351,
# before it `wait_for_inflight_requests`; resume_generation; update_weight_version), vllm/entrypoints/serve/dev/
# rlhf/api_router.py @0100a21 (the dev routes and their answers); PrimeIntellect-ai/prime-rl
# src/prime_rl/inference/vllm/server.py @559b447 (the same idea: wrap build_app, include a router, forward with
# collective_rpc).
#
# **Untested against a real vLLM here** (no GPU vLLM where rollstream's tests run): the tests compile this file and
# check ROUTES against the client; they do not start it. Targets vLLM's v1 engine as of 2026 (the files above); with
# more than one API server process (--api-server-count > 1) the routes would be missing from the other processes,
# so that is refused.

import inspect
import json
import logging
import os
import sys

EXTENSION = "rollstream_worker.RollstreamWorkerExtension"
WORKER_METHOD = "rollstream_load_weights_from_dir"
PAUSE_MODES = ("abort", "wait", "keep")

ROUTES = (
    {"name": "weights", "method": "POST", "path": "/update_weights", "query": (), "body": ("weight_dir",), "install": "always"},
    {"name": "pause", "method": "POST", "path": "/pause", "query": ("mode",), "body": (), "install": "if_absent"},
    {"name": "weight_version", "method": "POST", "path": "/update_weight_version", "query": (), "body": ("new_version",), "install": "if_absent"},
    {"name": "resume", "method": "POST", "path": "/resume", "query": (), "body": (), "install": "if_absent"},
)

logger = logging.getLogger("rollstream.vllm")


def _answer(status: int, content: dict):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content=content)


async def _body(request, route: dict) -> dict:
    """The JSON body's fields as the route's row names them; ValueError names a missing or unknown field."""
    raw = await request.body()
    data = json.loads(raw) if raw else {}
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    unknown = sorted(set(data) - set(route["body"]))
    missing = [f for f in route["body"] if not isinstance(data.get(f), str) or not data[f]]
    if unknown or missing:
        raise ValueError(f"{route['path']} takes {{{', '.join(route['body'])}}} (strings); unknown: {unknown}, missing: {missing}")
    return data


async def update_weights(request, route: dict):
    """Every worker loads the folder; then the prefix cache is reset, so no cached block of the old weights is
    reused (rollstream also salts the cache by version, so a reset that cannot happen is not an error)."""
    try:
        weight_dir = (await _body(request, route))["weight_dir"]
    except ValueError as e:
        return _answer(400, {"error": str(e)})
    if not os.path.isdir(weight_dir):
        return _answer(400, {"error": f"weight_dir {weight_dir} is not a folder on the server (weights.exportDir must be shared)"})
    engine = request.app.state.engine_client
    try:
        counts = await engine.collective_rpc(WORKER_METHOD, args=(weight_dir,))
        reset = await engine.reset_prefix_cache()
    except Exception as e:  # the workers' own message: a missing shard, a tensor of the wrong shape
        logger.exception("weight update from %s failed", weight_dir)
        return _answer(500, {"error": f"loading {weight_dir} failed: {e}"})
    return {"status": "ok", "weight_dir": weight_dir, "tensors_per_worker": counts, "prefix_cache_reset": reset is not False}


async def pause(request, route: dict):
    mode = request.query_params.get("mode", "abort")
    if mode not in PAUSE_MODES:
        return _answer(400, {"error": f"mode must be one of {', '.join(PAUSE_MODES)}, not {mode}"})
    engine = request.app.state.engine_client
    if "mode" in inspect.signature(engine.pause_generation).parameters:
        await engine.pause_generation(mode=mode)
    elif mode == "keep":
        return _answer(400, {"error": "this vLLM's pause_generation has no keep mode (vllm PR #32351): use abort or wait"})
    else:
        await engine.pause_generation(wait_for_inflight_requests=mode == "wait")
    return {"status": "paused"}


async def update_weight_version(request, route: dict):
    engine = request.app.state.engine_client
    if not hasattr(engine, "update_weight_version"):
        # rollstream's client reads a 404 as "this server labels no versions" and stamps tokens itself.
        return _answer(404, {"error": "this vLLM has no weight versions"})
    try:
        version = (await _body(request, route))["new_version"]
    except ValueError as e:
        return _answer(400, {"error": str(e)})
    await engine.update_weight_version(version)
    return {"success": True, "new_version": version}


async def resume(request, route: dict):
    await request.app.state.engine_client.resume_generation()
    return {"status": "resumed"}


HANDLERS = {"weights": update_weights, "pause": pause, "weight_version": update_weight_version, "resume": resume}


def endpoint_of(route: dict):
    """A FastAPI endpoint for one row: its only parameter is the request, so FastAPI validates nothing itself."""
    from fastapi import Request

    handler = HANDLERS[route["name"]]

    async def endpoint(request: Request):
        return await handler(request, route)

    return endpoint


def add_routes(app) -> None:
    """Adds ROUTES to a built app: if_absent rows only where upstream serves nothing there; ours go first."""
    served = {(m, r.path) for r in app.router.routes for m in (getattr(r, "methods", None) or ())}
    for route in ROUTES:
        if route["install"] == "if_absent" and (route["method"], route["path"]) in served:
            logger.info("%s %s: upstream's route is kept", route["method"], route["path"])
            continue
        app.add_api_route(route["path"], endpoint_of(route), methods=[route["method"]], include_in_schema=False)
        # Starlette matches in order: first, so dev mode's /update_weights {update_info} does not catch ours.
        app.router.routes.insert(0, app.router.routes.pop())


def main(argv: list[str]) -> None:
    import uvloop
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # releases before the utils split
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.utils import cli_env_setup
    except ImportError:  # moved with the serve/ split
        from vllm.entrypoints.serve.utils.api_utils import cli_env_setup

    here = os.path.dirname(os.path.abspath(__file__))
    # Workers import the extension by name in their own processes.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    cli_env_setup()  # what api_server's own __main__ does first (the workers' multiprocessing start method)
    args = make_arg_parser(FlexibleArgumentParser(description="vLLM's OpenAI server with rollstream's weight routes")).parse_args(argv)
    if getattr(args, "model_tag", None):  # `vllm serve <model>`'s positional, where the parser has it
        args.model = args.model_tag
    validate_parsed_serve_args(args)
    if not getattr(args, "worker_extension_cls", None):
        args.worker_extension_cls = EXTENSION
    if getattr(args, "api_server_count", 1) not in (None, 1) or getattr(args, "headless", False):
        sys.exit("serve.py adds its routes in this process only: run one API server (--api-server-count 1), not headless")

    built = api_server.build_app

    def build_app(*a, **kw):
        app = built(*a, **kw)
        add_routes(app)
        return app

    api_server.build_app = build_app
    uvloop.run(api_server.run_server(args))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(sys.argv[1:])

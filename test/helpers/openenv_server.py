"""An OpenEnv server for rollstream's protocol tests, on Debian's python3-websockets (10.4): HTTP GET /health,
/metadata and /schema, and the WebSocket session at /ws of meta-pytorch/OpenEnv@685de41
(src/openenv/core/env_server/http_server.py websocket_endpoint; types.py WSResetMessage, WSStepMessage,
WSStateMessage, WSCloseMessage -> WSObservationResponse {type: "observation", data: {observation, reward, done}},
WSStateResponse, WSErrorResponse {type: "error", data: {message, code}}; HealthResponse {status: "healthy"};
EnvironmentMetadata {name, description, version}). Written from those schemas; no upstream code is copied.

The environment: reset(seed) picks a word; the observation's `prompt` asks for it reversed; a step's action
{message} earns reward 1.0 when it is the reversed word (done), else 0.0 and one more try (done after 2 steps).
--mode die exits in the middle of its first episode, once (--marker says it already did).
"""

import argparse
import asyncio
import json
import os
import random
from http import HTTPStatus

import websockets

WORDS = ["abc", "cat", "dog", "sun", "tree", "moon", "star", "node"]
META = {"name": "reverse_word", "description": "Reverse a word; two tries.", "version": "0.3.1", "readme_content": None, "author": "rollstream tests", "documentation_url": None}
SCHEMA = {
    "action": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    "observation": {"type": "object", "properties": {"prompt": {"type": "string"}}},
    "state": {"type": "object", "properties": {"episode_id": {"type": "string"}, "step_count": {"type": "integer"}}},
}


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--mode", choices=["normal", "die"], default="normal")
    p.add_argument("--marker", default="")
    return p.parse_args()


ARGS = parse_args()


def http(status, body):
    return status, [("Content-Type", "application/json")], json.dumps(body).encode()


async def process_request(path, _headers):
    if path == "/health":
        return http(HTTPStatus.OK, {"status": "healthy"})
    if path == "/metadata":
        return http(HTTPStatus.OK, META)
    if path == "/schema":
        return http(HTTPStatus.OK, SCHEMA)
    if path == "/ws":
        return None
    return http(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})


def observation(prompt, reward, done):
    return {"type": "observation", "data": {"observation": {"prompt": prompt}, "reward": reward, "done": done}}


async def session(ws, _path=None):
    word, steps, episode = None, 0, None
    async for raw in ws:
        try:
            msg = json.loads(raw)
        except json.JSONDecodeError as e:
            await ws.send(json.dumps({"type": "error", "data": {"message": f"Invalid JSON: {e}", "code": "INVALID_JSON"}}))
            continue
        kind, data = msg.get("type", ""), msg.get("data") or {}
        if kind == "reset":
            rng = random.Random(data.get("seed", 0))
            word, steps, episode = rng.choice(WORDS), 0, f"ep-{data.get('seed', 0)}"
            reply = observation(f"Reverse the word: {word}", None, False)
        elif kind == "step":
            if word is None:
                reply = {"type": "error", "data": {"message": "step before reset", "code": "EXECUTION_ERROR"}}
            else:
                steps += 1
                if ARGS.mode == "die" and not os.path.exists(ARGS.marker):
                    open(ARGS.marker, "w").close()
                    os._exit(3)
                correct = str(data.get("message", "")).strip() == word[::-1]
                done = correct or steps >= 2
                reply = observation("Correct." if correct else f"Not quite. Reverse the word: {word}", 1.0 if correct else 0.0, done)
        elif kind == "state":
            reply = {"type": "state", "data": {"episode_id": episode, "step_count": steps}}
        elif kind == "close":
            break
        else:
            reply = {"type": "error", "data": {"message": f"Unknown message type: {kind}", "code": "UNKNOWN_TYPE"}}
        await ws.send(json.dumps(reply))


async def main():
    async with websockets.serve(session, "127.0.0.1", ARGS.port, process_request=process_request) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"ws://127.0.0.1:{port}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())

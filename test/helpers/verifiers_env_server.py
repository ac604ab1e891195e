"""A verifiers v1 env-server for rollstream's protocol tests: a ZMQ ROUTER speaking the wire of
PrimeIntellect-ai/verifiers@a60a606 (verifiers/v1/serve/server.py: 4 frames in [identity, request_id, method,
msgpack(payload)], 3 out [identity, request_id, msgpack(response)]; methods health, run, cancel as in
verifiers/v1/serve/types.py). A run plays a reverse-text task (after verifiers' environments/reverse_text: the
reply is scored by its longest-common-subsequence ratio to the reversed text) for `turns` model turns, calling
the model itself on the client's vLLM /inference/v1/generate with the client's headers, and answers a
WireEpisode whose one trace carries MessageNodes (token_ids, mask, logprobs: verifiers/v1/graph.py), rewards and
metrics (verifiers/v1/trace.py). Written from those schemas; no upstream code is copied.

It renders with rollstream's byte tokenizer (kernels/tokenizer.ts: ids 0-255 bytes, 256 pad, 257 bos, 258 eos,
259 system, 260 user, 261 assistant, 262 tool, 263 end; <|bos|> then <|role|> content <|end|> per message), the
job verifiers' renderer does for a Hugging Face model.

Modes (--mode): normal; slow (never answers a run: the client's deadline must cancel it); die (exits in the
middle of its first episode, once: --marker names the file that says it already did); bad-tokens (the trace's
first sampled token differs from what the engine returned). Every request is logged to --log as one line.
"""

import argparse
import asyncio
import difflib
import json
import os
import urllib.request
import uuid

import msgpack
import zmq
import zmq.asyncio

BOS, ROLE_IDS, END = 257, {"system": 259, "user": 260, "assistant": 261, "tool": 262}, 263


def encode(text):
    return list(text.encode("utf-8"))


def decode(ids):
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class Server:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(args.address)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.running = {}

    def log(self, *parts):
        if self.args.log:
            with open(self.args.log, "a") as f:
                f.write(" ".join(str(p) for p in parts) + "\n")

    async def reply(self, ident, rid, response):
        try:
            await self.sock.send_multipart([ident, rid, msgpack.packb(response, use_bin_type=True)])
        except zmq.ZMQError:
            pass

    async def handle(self, ident, rid, method, payload):
        name = method.decode()
        body = msgpack.unpackb(payload, raw=False)
        self.log(name, rid.decode(), json.dumps(body.get("request_id")) if name == "cancel" else "")
        try:
            if name == "health":
                response = {"success": True, "error": None}
            elif name == "run":
                try:
                    response = {"success": True, "error": None, "episode": await self.run(body)}
                finally:
                    self.running.pop(rid.decode(), None)
            elif name == "cancel":
                task = self.running.get(body["request_id"])
                if task is not None:
                    task.cancel()
                self.log("cancelled", body["request_id"], task is not None)
                response = {"success": True, "error": None, "cancelled": task is not None}
            else:
                response = {"success": False, "error": f"unknown method {name!r}"}
        except asyncio.CancelledError:
            response = {"success": False, "error": "Cancelled: rollout aborted"}
        except Exception as e:  # a failed request is data: report it and keep serving
            response = {"success": False, "error": f"{type(e).__name__}: {e}"}
        await self.reply(ident, rid, response)

    def generate(self, client, prompt_ids, sampling):
        body = {
            "request_id": uuid.uuid4().hex,
            "token_ids": prompt_ids,
            "sampling_params": {
                "max_tokens": sampling.get("max_tokens"),
                "temperature": sampling.get("temperature"),
                "top_p": sampling.get("top_p"),
                "logprobs": 0,
            },
            "output_mode": "tokens",
            "return_token_ids": True,
            "stream": False,
        }
        req = urllib.request.Request(
            client["base_url"].rstrip("/") + "/inference/v1/generate",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **client.get("headers", {})},
        )
        with urllib.request.urlopen(req, timeout=120) as res:
            choice = json.loads(res.read())["choices"][0]
        return choice["token_ids"], [c["logprob"] for c in choice["logprobs"]["content"]], choice["finish_reason"]

    async def run(self, req):
        task, client, sampling = req["task_data"], req["client"], req["sampling"]
        if self.args.mode == "slow":
            await asyncio.sleep(3600)
        turns = int(task.get("turns", 1))
        messages = []
        if task.get("system_prompt"):
            messages.append({"role": "system", "content": task["system_prompt"]})
        messages.append({"role": "user", "content": task["prompt"]})
        nodes = []
        for i, m in enumerate(messages):
            ids = ([BOS] if i == 0 else []) + [ROLE_IDS[m["role"]]] + encode(m["content"]) + [END]
            nodes.append(self.node(m, ids))
        calls, reply, finish = [], "", None
        for turn in range(turns):
            if turn > 0:
                # The previous reply did not end on <|end|> (it hit max_tokens): the template closes it here.
                closer = [] if nodes[-1]["token_ids"][-1] == END else [END]
                follow = {"role": "user", "content": "Once more, the same reversed text."}
                nodes.append(self.node(follow, closer + [ROLE_IDS["user"]] + encode(follow["content"]) + [END]))
            prompt = [t for n in nodes for t in n["token_ids"]] + [ROLE_IDS["assistant"]]
            ids, logprobs, finish = await asyncio.to_thread(self.generate, client, prompt, sampling)
            if self.args.mode == "die" and not os.path.exists(self.args.marker):
                open(self.args.marker, "w").close()
                self.log("dying mid-episode")
                os._exit(3)
            if self.args.mode == "bad-tokens":
                ids = [(ids[0] + 1) % 256] + ids[1:]
            reply = decode(ids)
            node = self.node({"role": "assistant", "content": reply}, [ROLE_IDS["assistant"]] + ids, sampled=True, logprobs=logprobs)
            nodes.append(node)
            calls.append({"node": len(nodes) - 1, "model": req["model"], "endpoint": "/inference/v1/generate", "finish_reason": finish})
        for i, n in enumerate(nodes):
            n["parent"] = None if i == 0 else i - 1  # one linear branch
        target = task.get("answer", task["prompt"][::-1])
        lcs = difflib.SequenceMatcher(None, reply.strip(), target).ratio()
        trace = {
            "version": 1,
            "id": uuid.uuid4().hex,
            "verifiers": {"version": "test-server", "commit": None},
            "task": {"type": "ReverseTextTask", "data": task},
            "agent": {"config": {}, "name": "agent", "trainable": True},
            "nodes": nodes,
            "calls": calls,
            "rewards": {"lcs": {"score": lcs, "weight": 1.0}, "exact": {"score": float(reply.strip() == target), "weight": 0.0}},
            "metrics": {"reply_chars": float(len(reply))},
            "info": {},
            "is_completed": True,
            "ok": True,
            "stop_condition": "max_output_tokens" if finish == "length" else "completed",
            "errors": [],
        }
        return {"id": uuid.uuid4().hex, "env": {"id": "reverse-text", "name": None}, "task": trace["task"], "ok": True, "errors": [], "traces": [trace]}

    @staticmethod
    def node(message, token_ids, sampled=False, logprobs=None):
        scaffold = 1 if sampled else len(token_ids)
        return {
            "parent": None,
            "message": message,
            "sampled": sampled,
            "token_ids": token_ids,
            "mask": [False] * scaffold + [True] * (len(token_ids) - scaffold),
            "logprobs": logprobs or [],
        }

    async def serve(self):
        print(self.address, flush=True)
        tasks = set()
        while True:
            frames = await self.sock.recv_multipart()
            if len(frames) != 4:
                continue
            ident, rid, method, payload = frames
            task = asyncio.create_task(self.handle(ident, rid, method, payload))
            if method == b"run":
                self.running[rid.decode()] = task
            tasks.add(task)
            task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--address", default="tcp://127.0.0.1:0")
    p.add_argument("--mode", choices=["normal", "slow", "die", "bad-tokens"], default="normal")
    p.add_argument("--marker", default="")
    p.add_argument("--log", default="")
    asyncio.run(Server(p.parse_args()).serve())

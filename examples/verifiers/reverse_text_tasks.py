"""Writes the reverse-text tasks of examples/verifiers-reverse-text.yaml: JSON lines of verifiers task data
(prompt, answer, name), one task a line, for a train and an eval split that share no word.

Like the demo's weak teacher, `sft_target` (the reply rollstream's SFT stage trains on) is wrong on purpose for
part of the words: for a word whose first letter comes before its last in the alphabet, 70% of the time the
teacher swaps the first two letters of the reversed word. SFT alone then tops out well below 1; the server's
reward (the reply's longest-common-subsequence ratio to the reversed word) is what RL learns the rest from.
Usage: python3 reverse_text_tasks.py OUT_DIR
"""

import itertools
import json
import os
import random
import sys

LETTERS = "abcdefgh"


def teacher(word, rng):
    rev = word[::-1]
    if word[0] < word[-1] and rng.random() < 0.7:
        return rev[1] + rev[0] + rev[2:]
    return rev


def main(out):
    rng = random.Random(7)
    words = ["".join(p) for n in (3, 4) for p in itertools.product(LETTERS, repeat=n)]
    rng.shuffle(words)
    split = {"eval": words[:400], "train": words[400:]}
    os.makedirs(out, exist_ok=True)
    for name, ws in split.items():
        with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
            for i, w in enumerate(ws):
                f.write(json.dumps({"name": f"{name}-{i}", "prompt": w, "answer": w[::-1], "sft_target": teacher(w, rng)}) + "\n")
    print(f"{len(split['train'])} train and {len(split['eval'])} eval tasks in {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/verifiers-reverse-text-tasks")

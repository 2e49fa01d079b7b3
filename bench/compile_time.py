"""Bytecode compile time per program over the co-search candidates (parse/expand timed apart).

    python bench/compile_time.py [path/to/cosearch_candidates.jsonl]
"""
import json
import sys
import time
from pathlib import Path

import numpy as np

import ndvm
from ndvm.clients import bytecode

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cosearch_candidates.jsonl"


def best_of(f, repeat=7, number=50):
    """Best mean time of one call of f, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            f()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def main(path=DEFAULT):
    srcs = [json.loads(line)["src"] for line in Path(path).read_text().splitlines() if line.strip()]
    parse_us, compile_us, sizes = [], [], []
    for src in srcs:
        prog = ndvm.parse(src)
        parse_us.append(best_of(lambda: ndvm.parse(src)) * 1e6)
        compile_us.append(best_of(lambda: bytecode.CLIENT.compile(prog)) * 1e6)
        sizes.append(bytecode.CLIENT.compile(prog).n_instructions)
    for label, xs in (("parse+expand", parse_us), ("bytecode compile", compile_us)):
        xs = np.array(xs)
        print(f"{label:>17}: median {np.median(xs):6.2f} us  p90 {np.percentile(xs, 90):6.2f} us"
              f"  max {xs.max():6.2f} us  over {len(xs)} programs")
    print(f"{'instructions':>17}: median {np.median(sizes):.0f}  max {max(sizes)}")


if __name__ == "__main__":
    main(*sys.argv[1:])

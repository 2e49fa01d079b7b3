"""Scaling of ndvm.fit_many on the 247 co-search candidates (the paper's protocol), and the
per-task overhead of the executor path on a Dask LocalCluster, which sets the default chunk size.

    python bench/parallel_scaling.py [--rounds 7] [--dask]

Protocol: x = linspace(0.1, 6, 64), y = exp(-0.3x) cos(2x) + 0.02 N(0, 1) (seed 0), the first 44
points train, 50 Adam steps, lr 0.05, one start per candidate. Rounds alternate 1 and 2 workers
(the machine is shared); the median and best rate of each are reported, next to the speed-up a
GIL-free reference workload (sha256 in 2 threads) gets in the same rounds: on a busy machine
(Linux autogroup scheduling) a second thread may gain nothing, whatever the code.
"""
import hashlib
import threading
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import ndvm
from ndvm import parallel

CANDIDATES = Path(__file__).resolve().parents[2] / "shared" / "data" / "cosearch_candidates.jsonl"


def protocol():
    """The candidates' programs and the training data of the paper's protocol."""
    rows = [json.loads(line) for line in CANDIDATES.read_text().splitlines() if line.strip()]
    progs = [ndvm.parse(r["src"], name=f"cosearch[{i}]") for i, r in enumerate(rows)]
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x) + 0.02 * np.random.default_rng(0).standard_normal(64)
    return progs, {"x": x[:44]}, y[:44]


def rate(fn, n):
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


_BLOCK = b"x" * (16 << 20)


def _hash_rate(threads):
    """MB/s of sha256 (which releases the GIL) over ``threads`` threads: the machine's headroom."""
    pool = [threading.Thread(target=lambda: hashlib.sha256(_BLOCK).digest())
            for _ in range(threads)]
    t = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return threads * len(_BLOCK) / 2**20 / (time.perf_counter() - t)


def scaling(progs, data, target, rounds, repeat):
    """Candidates/s for 1 and 2 pool workers, rounds interleaved; checks identical results."""
    batch = progs * repeat
    opts = dict(data=data, target=target, steps=50, lr=0.05)
    reference = ndvm.fit_many(batch, workers=1, **opts)  # warm every worker's machine
    rates = {1: [], 2: []}
    headroom = []
    for _ in range(rounds):
        headroom.append(_hash_rate(2) / _hash_rate(1))
        for w in (1, 2):
            out = []
            rates[w].append(rate(lambda w=w, out=out: out.append(
                ndvm.fit_many(batch, workers=w, **opts)), len(batch)))
            assert all(_same(a, b) for a, b in zip(out[0], reference))
    serial = rate(lambda: [_fit_or_error(p, opts) for p in batch], len(batch))
    for w in (1, 2):
        r = np.array(rates[w])
        print(f"fit_many workers={w}: median {np.median(r):7.0f} cand/s, best {r.max():7.0f}")
    print(f"plain ndvm.fit loop:  {serial:7.0f} cand/s")
    print(f"speed-up 2 vs 1 worker: median {np.median(rates[2]) / np.median(rates[1]):.2f}x, "
          f"best {max(rates[2]) / max(rates[1]):.2f}x; per round: "
          + " ".join(f"{b / a:.2f}" for a, b in zip(rates[1], rates[2])))
    print("sha256 2 vs 1 thread, same rounds:  "
          + " ".join(f"{h:.2f}" for h in headroom) + f"  (median {np.median(headroom):.2f}x)")


def _fit_or_error(p, opts):
    try:
        return ndvm.fit(p, **opts)
    except ndvm.SchemeError as e:
        return e


def _same(a, b):
    if isinstance(a, ndvm.CandidateError):
        return isinstance(b, ndvm.CandidateError) and str(a.error) == str(b.error)
    return a.history.tobytes() == b.history.tobytes() and a.params == b.params


def _noop(_):
    return None


def dask_overhead(progs, data, target):
    """Per-task overhead of client.get_executor() (empty tasks), and fit_many by chunk size."""
    from distributed import Client, LocalCluster

    opts = dict(data=data, target=target, steps=50, lr=0.05)
    batch = progs * 4
    reference = ndvm.fit_many(batch, workers=1, **opts)
    for processes in (False, True):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            ex = client.get_executor()
            for f in [ex.submit(_noop, i) for i in range(50)]:
                f.result()
            n = 400
            t = time.perf_counter()
            for f in [ex.submit(_noop, i) for i in range(n)]:
                f.result()
            per_task = (time.perf_counter() - t) / n
            t = time.perf_counter()
            for i in range(50):
                ex.submit(_noop, i).result()
            latency = (time.perf_counter() - t) / 50
            print(f"dask processes={processes}: {per_task * 1e3:.2f} ms/task amortized over "
                  f"{n} empty tasks, {latency * 1e3:.2f} ms round trip")
            for chunk in (1, 4, 16, 64, 256):
                out = []
                r = rate(lambda ex=ex, chunk=chunk, out=out: out.append(
                    ndvm.fit_many(batch, executor=ex, chunk_size=chunk, **opts)), len(batch))
                assert all(_same(a, b) for a, b in zip(out[0], reference))
                print(f"  chunk_size={chunk:4d}: {r:7.0f} cand/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=8, help="batches of the 247 per timed call")
    ap.add_argument("--dask", action="store_true", help="also measure the Dask executor path")
    args = ap.parse_args()
    progs, data, target = protocol()
    print(f"{len(progs)} candidates, cores available: {parallel.default_workers()}, "
          f"load average: {os.getloadavg()[0]:.2f}")
    scaling(progs, data, target, args.rounds, args.repeat)
    if args.dask:
        dask_overhead(progs, data, target)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

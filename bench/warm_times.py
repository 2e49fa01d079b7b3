"""Warm evaluate-with-gradient time per call, from Python, at 1 and 256 lanes (lanes = starts).

    python bench/warm_times.py [--clients dmci bytecode] [--repeat 2000]

Prints µs per call (median of several batches) for damped_oscillator, logistic_map_loop and
kalman2d_T80. Kalman binds `obs` [80, 2] from ../shared/data/oracle_refs.json when present,
else a seeded standard-normal matrix.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np

import ndvm

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "oracle_refs.json"

PROGRAMS = {
    "damped_oscillator": ("(* A (* (exp (- 0 (* b t))) (cos (* omega t))))",
                          {"A": 1.0, "b": 0.3, "omega": 2.0, "t": 1.5}),
    "logistic_map_loop": ("(loop ((x x0) (k 0)) (if (= k 16) x (recur (* r (* x (- 1.0 x))) "
                          "(+ k 1))))", {"r": 3.2, "x0": 0.4}),
}


def kalman():
    if DATA.exists():
        p = {q["name"]: q for q in json.loads(DATA.read_text())["programs"]}["kalman2d_T80"]
        m = p["matrix"]
        obs = np.array(m["data"]).reshape(m["rows"], m["cols"])
        return p["src"], p["scalars"], obs
    src = Path(__file__).resolve().parents[1] / "ndvm" / "examples" / "kalman2d_T80.scm"
    obs = np.random.default_rng(0).standard_normal((80, 2))
    return src.read_text(), {"q": 0.05, "r": 0.1}, obs


def time_call(fn, repeat):
    fn()
    batches = []
    per = max(1, repeat // 5)
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        batches.append((time.perf_counter() - t0) / per)
    return float(np.median(batches)) * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", nargs="*", default=list(ndvm.clients()))
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--dtype", default="float64")
    args = ap.parse_args(argv)
    progs = dict(PROGRAMS)
    ksrc, kparams, obs = kalman()
    progs["kalman2d_T80"] = (ksrc, kparams)
    rng = np.random.default_rng(0)
    print(f"warm evaluate(grad=True) from Python, {args.dtype}, µs per call")
    print(f"{'program':<20} {'client':<9} {'1 lane':>10} {'256 lanes':>11} {'per-lane gain':>14}")
    for name, (src, params) in progs.items():
        prog = ndvm.parse(src, name)
        consts = {"obs": obs} if "obs" in prog.free_names else {}
        for client in args.clients:
            ev = ndvm.Evaluator(client=client, dtype=args.dtype)
            times = []
            for lanes in (1, 256):
                p = {k: v if lanes == 1 else v * (1 + 0.01 * rng.standard_normal(lanes))
                     for k, v in params.items()}
                rep = args.repeat if name != "kalman2d_T80" else max(20, args.repeat // 50)
                times.append(time_call(lambda: ev.evaluate(prog, params=p, consts=consts,
                                                           grad=True), rep))
            gain = times[0] * 256 / times[1]
            print(f"{name:<20} {client:<9} {times[0]:>10.1f} {times[1]:>11.1f} {gain:>13.1f}x")


if __name__ == "__main__":
    main()

"""A quick table of warm evaluate-with-gradient times, bytecode vs dmci (best of several runs).

    python bench/compare_clients.py
"""
import time

import ndvm
from test_clients import cases, inputs


def calls_per_round(f, min_time=0.02):
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        if time.perf_counter() - t0 > min_time:
            return n
        n *= 2


def best_us(fs, repeat=15):
    """Best time per call of each function, in µs; rounds alternate so load drifts hit both."""
    ns = [calls_per_round(f) for f in fs]
    best = [float("inf")] * len(fs)
    for _ in range(repeat):
        for i, (f, n) in enumerate(zip(fs, ns)):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            best[i] = min(best[i], (time.perf_counter() - t0) / n)
    return [b * 1e6 for b in best]


def main():
    print(f"{'program':<20}{'B':>5}{'dmci us':>11}{'bytecode us':>13}{'ratio':>8}")
    for case in cases():
        prog = ndvm.parse(case["src"], name=case["name"])
        for B in (1, 256):
            params, data, consts = inputs(case, B)
            evs = {c: ndvm.Evaluator(client=c) for c in ("dmci", "bytecode")}
            fs = [lambda ev=ev: ev.evaluate(prog, params=params, data=data, consts=consts,
                                            grad=True) for ev in evs.values()]
            t = dict(zip(evs, best_us(fs)))
            print(f"{case['name']:<20}{B:>5}{t['dmci']:>11.2f}{t['bytecode']:>13.2f}"
                  f"{t['dmci'] / t['bytecode']:>8.2f}")


if __name__ == "__main__":
    main()

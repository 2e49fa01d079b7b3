"""A quick table of warm evaluate-with-gradient times, bytecode vs dmci (best of several runs).

    python bench/compare_clients.py
"""
import time

import ndvm
from test_clients import cases, inputs


def best_us(f, repeat=7, min_time=0.05):
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        if time.perf_counter() - t0 > min_time:
            break
        n *= 2
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main():
    print(f"{'program':<20}{'B':>5}{'dmci us':>11}{'bytecode us':>13}{'ratio':>8}")
    for case in cases():
        prog = ndvm.parse(case["src"], name=case["name"])
        for B in (1, 256):
            params, data, consts = inputs(case, B)
            t = {}
            for client in ("dmci", "bytecode"):
                ev = ndvm.Evaluator(client=client)
                t[client] = best_us(lambda: ev.evaluate(prog, params=params, data=data,
                                                        consts=consts, grad=True))
            print(f"{case['name']:<20}{B:>5}{t['dmci']:>11.2f}{t['bytecode']:>13.2f}"
                  f"{t['dmci'] / t['bytecode']:>8.2f}")


if __name__ == "__main__":
    main()

"""Calibrations per second on the paper's co-search protocol, side by side in one run.

    python bench/calibration_rate.py [--tagged-sample 8] [--no-torch]

Protocol (../shared/data/README.md): x = linspace(0.1, 6, 64), y = target(x) + 0.02 N(0, 1)
(seed 0); the first 44 points train, the last 20 are held out; each calibration is 50 Adam steps
at lr 0.05 from one start drawn from normal(0, 0.3). Implementations:
  (a) torch.optim.Adam driving ndvm.torch (a Python step per iteration),
  (b) ndvm.fit(optimizer="adam")   (the whole loop native),
  (c) ndvm.fit(optimizer="lm")     (Levenberg-Marquardt, 20 steps; at the default scaling
      "both" every start runs two trust-region shapes as two lanes, so it costs more per fit
      than the co-search's LM, the next row, which runs MINPACK's column-scaled one),
  (d) torch.optim.Adam driving the eager `tagged` baseline (on a sample; it is slow).
Reports candidates/s and how many candidates reach a good held-out fit (MSE < 0.1 var).
Then ndvm.fit (Adam, as (b)) with a shared ``evaluator=`` against none (a scientist calling it in
a loop): alternated over --rounds rounds, the median of the per-round ratios.
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import ndvm
from ndvm.cosearch.tasks import SEARCH_LM_SCALING

DATA = Path(os.environ.get("NDVM_SHARED_DATA")
            or Path(__file__).resolve().parents[1].parent / "shared" / "data")
TASKS = {
    "cosearch_candidates.jsonl": lambda x: np.exp(-0.3 * x) * np.cos(2 * x),
    "cosearch_rec_candidates.jsonl": lambda x: np.sin(1.2 * x) + 0.3 * x,
}


def protocol(target):
    x = np.linspace(0.1, 6.0, 64)
    y = target(x) + 0.02 * np.random.default_rng(0).standard_normal(64)
    return x[:44], y[:44], x[44:], y[44:]


def heldout_ok(prog, params, xh, yh):
    try:
        v = ndvm.Evaluator().evaluate(prog, params=params, data={"x": xh}).value[0]
    except ndvm.SchemeError:
        return False
    return bool(np.isfinite(v).all() and np.mean((v - yh) ** 2) < 0.1 * np.var(yh))


def torch_adam(prog, names, xt, yt, evaluate, steps=50, lr=0.05):
    import torch

    init = np.random.default_rng(0).normal(0.0, 0.3, len(names))
    ps = [torch.tensor([v], dtype=torch.float64, requires_grad=True) for v in init]
    opt = torch.optim.Adam(ps, lr=lr)
    yt_t = torch.tensor(yt)
    for _ in range(steps):
        opt.zero_grad()
        v = evaluate(dict(zip(names, ps)))
        loss = ((v[0] - yt_t) ** 2).mean()
        if not torch.isfinite(loss):
            break
        loss.backward()
        opt.step()
    return {n: float(p.detach()[0]) for n, p in zip(names, ps)}


def run_file(name, tagged_sample, torch_rows=True, rounds=7):
    path = DATA / name
    if not path.exists():
        print(f"{path} is not available: skipped")
        return
    cands = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    xt, yt, xh, yh = protocol(TASKS[name])
    progs = [ndvm.parse(c["src"]) for c in cands]
    names = [tuple(n for n in p.free_names if n != "x") for p in progs]
    rows = {}

    ev = ndvm.Evaluator()

    def fit_all(shared=True, **opts):
        out = []
        where = {"evaluator": ev} if shared else {}
        for p, n in zip(progs, names):
            try:
                data = {"x": xt} if "x" in p.free_names else {}
                out.append(ndvm.fit(p, data=data, target=yt, params=n, **where, **opts))
            except ndvm.SchemeError:  # a broken candidate (the files hold a few)
                out.append(None)
        return out

    for label, opts in (("ndvm.fit adam", dict(optimizer="adam", steps=50, lr=0.05)),
                        ("ndvm.fit lm (20 steps)", dict(optimizer="lm", steps=20)),
                        (f"ndvm.fit lm (20, {SEARCH_LM_SCALING!r}: co-search)",
                         dict(optimizer="lm", steps=20, scaling=SEARCH_LM_SCALING))):
        t0 = time.perf_counter()
        fits = fit_all(**opts)
        rate = len(progs) / (time.perf_counter() - t0)
        rows[label] = (rate, sum(f is not None and heldout_ok(p, f.params, xh, yh)
                                 for p, f in zip(progs, fits)))
    try:
        if not torch_rows:
            raise ImportError
        import torch  # noqa: F401

        import ndvm.torch as nt
        from ndvm.baselines import TaggedEvaluator
    except ImportError:
        print("torch is not installed or --no-torch: (a) and (d) skipped")
    else:
        torch.set_num_threads(1)
        t0 = time.perf_counter()
        out = []
        for p, n in zip(progs, names):
            try:
                out.append(torch_adam(p, n, xt, yt,
                                      lambda ps, p=p: nt.evaluate(p, ps, data={"x": xt})))
            except ndvm.SchemeError:
                out.append(None)
        rows["torch Adam + ndvm.torch"] = (len(progs) / (time.perf_counter() - t0),
                                          sum(o is not None and heldout_ok(p, o, xh, yh)
                                              for p, o in zip(progs, out)))
        tagged = TaggedEvaluator()
        sample = list(zip(progs, names))[:tagged_sample]

        t0 = time.perf_counter()
        done = 0
        for p, n in sample:
            init = np.random.default_rng(0).normal(0.0, 0.3, len(n))
            params = dict(zip(n, init))
            m = {k: 0.0 for k in n}
            v2 = {k: 0.0 for k in n}
            for step in range(1, 51):  # Adam by hand on the baseline's gradients
                r = tagged.evaluate(p, params=params, data={"x": xt}, grad=True)
                resid = r.value[0] - yt
                g = r.vjp(2.0 * resid[None, :] / len(yt))
                for k in n:
                    gk = float(g[k][0])
                    m[k] = 0.9 * m[k] + 0.1 * gk
                    v2[k] = 0.999 * v2[k] + 0.001 * gk * gk
                    params[k] -= 0.05 * (m[k] / (1 - 0.9 ** step)) / (
                        np.sqrt(v2[k] / (1 - 0.999 ** step)) + 1e-8)
            done += 1
        rows[f"tagged baseline + Adam ({done} sampled)"] = (done / (time.perf_counter() - t0),
                                                           None)
    print(f"\n{name}: {len(progs)} candidates, 50 Adam steps (lm: 20 steps), 44 train points")
    print(f"{'implementation':<40} {'calibrations/s':>15} {'good held-out fits':>20}")
    for k, (rate, good) in rows.items():
        print(f"{k:<40} {rate:>15.0f} {('' if good is None else good):>20}")
    adam = dict(optimizer="adam", steps=50, lr=0.05)
    rates = {True: [], False: []}
    for _ in range(rounds):  # alternated, so that both see the same machine
        for shared in (True, False):
            t0 = time.perf_counter()
            fit_all(shared=shared, **adam)
            rates[shared].append(len(progs) / (time.perf_counter() - t0))
    ratio = float(np.median(np.array(rates[False]) / np.array(rates[True])))
    print(f"ndvm.fit adam, evaluator= shared: {np.median(rates[True]):.0f}/s; without "
          f"evaluator=: {np.median(rates[False]):.0f}/s; without/with {ratio:.3f} (median of "
          f"{rounds} alternated rounds)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tagged-sample", type=int, default=8)
    ap.add_argument("--no-torch", action="store_true", help="only the native rows (b) and (c)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="alternated rounds of the shared-evaluator comparison")
    args = ap.parse_args()
    for name in TASKS:
        run_file(name, args.tagged_sample, torch_rows=not args.no_torch, rounds=args.rounds)


if __name__ == "__main__":
    main()

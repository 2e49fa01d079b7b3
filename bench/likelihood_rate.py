"""Kalman maximum-likelihood calibrations per CPU-hour: the co-search's likelihood fits.

    python bench/likelihood_rate.py [--repeat 200] [--old-ref f7b711d]

One calibration = ``ndvm.cosearch.minimize_value`` on the kalman task as the co-search runs it
(the 2x2 Kalman-filter NLL of 80 simulated steps, q and r from 1.0, both kept positive). The
current code (ndvm.fit, loss="value": native L-BFGS) runs side by side with the implementation
of ``minimize_value`` at git revision --old-ref (the hand-written Python BFGS it replaced), when
git and that revision are available. CPU time is the process's (time.process_time).
"""
import argparse
import subprocess
import time
import types
from pathlib import Path

import numpy as np

import ndvm
from ndvm.cosearch import minimize_value
from ndvm.cosearch.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]


def old_minimize_value(ref):
    """minimize_value as it was at git revision ref, or None when git cannot show it."""
    try:
        src = subprocess.run(["git", "show", f"{ref}:ndvm/cosearch/_calibrate.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType("old_calibrate")
    exec(compile(src, f"{ref}:_calibrate.py", "exec"), mod.__dict__)  # noqa: S102
    return mod.minimize_value


def measure(f, prog, task, ev, repeat):
    init = dict(task.init)
    f(prog, task.params, init, consts=task.consts, positive=task.positive, evaluator=ev)  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        r = f(prog, task.params, init, consts=task.consts, positive=task.positive, evaluator=ev)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    conv = r.converged if np.ndim(r.converged) == 0 else r.converged[0]
    return r, repeat / cpu * 3600.0, repeat / wall, bool(conv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--old-ref", default="f7b711d")
    args = ap.parse_args()
    task = get_task("kalman")
    prog = ndvm.parse(task.seeds[0])
    ev = ndvm.Evaluator()
    impls = {"ndvm.fit loss='value' (native L-BFGS)": minimize_value}
    old = old_minimize_value(args.old_ref)
    if old is None:
        print(f"git revision {args.old_ref} is not available: the old implementation is skipped")
    else:
        impls[f"Python BFGS ({args.old_ref})"] = old
    rows = {}
    for rnd in range(2):  # interleaved: each implementation twice, the better run kept
        for name, f in impls.items():
            r, per_cpu_h, per_s, conv = measure(f, prog, task, ev, args.repeat)
            if name not in rows or per_cpu_h > rows[name][1]:
                rows[name] = (r, per_cpu_h, per_s, conv)
    print(f"kalman: {args.repeat} calibrations of q and r per run (best of 2 interleaved runs)")
    print(f"{'implementation':<40} {'per CPU-hour':>13} {'per second':>11} {'evals':>6} "
          f"{'NLL':>14} {'q':>10} {'r':>10} {'converged':>9}")
    for name, (r, per_cpu_h, per_s, conv) in rows.items():
        print(f"{name:<40} {per_cpu_h:>13,.0f} {per_s:>11.1f} {r.n_evals:>6} {r.loss:>14.8f} "
              f"{r.params['q']:>10.6f} {r.params['r']:>10.6f} {str(conv):>9}")


if __name__ == "__main__":
    main()

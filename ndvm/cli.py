"""The ``ndvm`` command line: run, fit, search, bench and disasm.

``ndvm run FILE.scm --param a=1 --data x=0.5,1.0 [--grad]``; ``ndvm fit FILE.scm data.csv
--target y``; ``ndvm search --task damped [--proposer mutate] [--budget 60s] [--out run/]``;
``ndvm bench``; ``ndvm disasm FILE.scm``. Errors in user input print one line (file:line:col:
kind: message) and exit with status 2.
"""
import argparse
import sys
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["main"]


def _assignment(text):
    name, sep, values = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE[,VALUE...], got {text!r}")
    try:
        parsed = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"values of {name!r} must be numbers: {values!r}") from None
    if not parsed:
        raise argparse.ArgumentTypeError(f"{name!r} has no values")
    return name, parsed[0] if len(parsed) == 1 else np.array(parsed)


def example_path(name="damped_oscillator.scm"):
    """Path of an example program shipped with the package."""
    return Path(str(resources.files("ndvm") / "examples" / name))


def _read_program(path):
    import ndvm

    if path == "-":
        return ndvm.parse(sys.stdin.read(), name="<stdin>")
    if path.startswith("example:"):
        p = example_path(path.split(":", 1)[1])
    else:
        p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SystemExit(f"ndvm: cannot read {path}: {e.strerror}") from None
    return ndvm.parse(text, name=str(path))


def _format_row(cells, widths):
    return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def cmd_run(args):
    """Evaluate a program file and print its values (and gradients with --grad)."""
    import ndvm

    prog = _read_program(args.file)
    params = dict(args.param or [])
    data = dict(args.data or [])
    consts = dict(args.const or [])
    ev = ndvm.Evaluator(client=args.client, dtype=args.dtype, compat=args.compat)
    res = ev.evaluate(prog, params=params, data=data, consts=consts, grad=args.grad)
    S, N = res.value.shape
    jac = res.jacobian() if args.grad else {}
    header = ["start", "point", "value"] + [f"d/d{k}" for k in jac]
    rows = []
    for s in range(S):
        for n in range(N):
            row = [s, n, f"{res.value[s, n]:.10g}"] + [f"{jac[k][s, n]:.10g}" for k in jac]
            rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print(f"{prog.name}: free names {', '.join(prog.free_names) or '(none)'}; "
          f"{S} start(s) x {N} point(s); client {args.client}")
    print(_format_row(header, widths))
    for r in rows:
        print(_format_row(r, widths))
    if args.grad:
        g = res.grad
        print("gradient of the sum of values: " +
              ", ".join(f"{k}={np.array2string(v, precision=8)}" for k, v in g.items()))
    return 0


def cmd_disasm(args):
    """Compile a program to stack bytecode and print the listing."""
    from ndvm.clients import bytecode

    print(bytecode.disassemble(_read_program(args.file)), end="")
    return 0


class InputError(ValueError):
    """A user-input error with a location (file:line:col)."""


def read_csv(path):
    """Columns of a CSV file with a header row: name -> float array."""
    import csv

    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise SystemExit(f"ndvm: cannot read {path}: {e.strerror}") from None
    with f:
        rows = list(csv.reader(f))
    if not rows:
        raise InputError(f"{path}:1:1: the file is empty (expected a header row of column names)")
    header = [h.strip() for h in rows[0]]
    if any(not h for h in header):
        raise InputError(f"{path}:1:1: every column needs a name in the header row")
    cols = {h: [] for h in header}
    for i, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{path}:{i}:1: expected {len(header)} fields, got {len(row)}")
        col = 1
        for h, cell in zip(header, row):
            try:
                cols[h].append(float(cell))
            except ValueError:
                raise InputError(f"{path}:{i}:{col}: column {h!r}: expected a number, "
                                 f"got {cell.strip()!r}") from None
            col += len(cell) + 1
    if not cols[header[0]]:
        raise InputError(f"{path}:2:1: no data rows")
    return {h: np.array(v) for h, v in cols.items()}


def _table(header, rows):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    return "\n".join(_format_row(r, widths) for r in [header] + rows)


def cmd_fit(args):
    """Calibrate a program's parameters to a CSV column (mean squared error) and print them."""
    import ndvm

    prog = _read_program(args.file)
    cols = read_csv(args.csv)
    if args.target not in cols:
        raise InputError(f"{args.csv}:1:1: no column {args.target!r} "
                         f"(columns: {', '.join(cols)})")
    y = cols[args.target]
    data = {k: v for k, v in cols.items() if k in prog.free_names and k != args.target}
    params = args.params.split(",") if args.params else None
    init = dict(args.init or [])
    res = ndvm.fit(prog, data=data, target=y, params=params, starts=args.starts,
                   init=init or None, optimizer=args.optimizer, steps=args.steps, lr=args.lr,
                   seed=args.seed, client=args.client)
    pred = ndvm.Evaluator(client=args.client).evaluate(prog, params=res.params, data=data).value[0]
    r2 = 1.0 - float(np.mean((pred - y) ** 2)) / float(np.var(y)) if np.var(y) > 0 else float("nan")
    print(f"{prog.name}: fitted {', '.join(res.names)} to {args.target} over {y.size} rows "
          f"(data: {', '.join(data) or 'none'}); {args.optimizer}, {args.starts} start(s), "
          f"{res.n_evals} evaluations")
    print(_table(["parameter", "value"], [[k, f"{v:.10g}"] for k, v in res.params.items()]))
    print(f"loss (MSE) {res.loss:.6g}   R2 {r2:.4f}")
    if args.plot:
        _plot_fit(args.plot, data, y, pred, args.target)
    return 0


def _plot_fit(path, data, y, pred, target):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("ndvm: matplotlib is not installed; no plot written", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(data) == 1:
        (name, x), = data.items()
        order = np.argsort(x)
        ax.scatter(x, y, s=10, c="k", label=target)
        ax.plot(x[order], np.broadcast_to(pred, y.shape)[order], c="C3", label="fit")
        ax.set_xlabel(name)
    else:
        ax.scatter(y, np.broadcast_to(pred, y.shape), s=10)
        ax.set_xlabel(target)
        ax.set_ylabel("fit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def cmd_search(args):
    """Search program structures for a task; print the Pareto front (held-out error vs size)."""
    import ndvm
    from ndvm.cosearch import report
    from ndvm.cosearch.tasks import get_task

    try:
        task = get_task(args.task)
    except ImportError as e:  # a task whose data needs an extra (the series need statsmodels)
        raise InputError(str(e)) from None
    options = {}
    if args.proposer == "llm":
        options = {"base_url": args.llm_url, "model": args.llm_model, "key_env": args.llm_key_env}
    fit_options = {k: v for k, v in (("starts", args.starts), ("steps", args.steps),
                                     ("optimizer", args.optimizer)) if v is not None}
    print(f"task {task.name}: {task.description}")
    if task.objective == "mse":
        print(f"  {task.train.size} training / {task.heldout.size} held-out points; a good fit "
              f"has held-out R2 > {task.threshold}; parameters {', '.join(task.params)}")
    for ref in task.references():  # fitted here, in the same run (series: the ARIMA baseline)
        print(f"  reference: {ref['label']}: held-out MSE {ref['heldout_error']:.4g}"
              + (f", RMSE {ref['rmse']:.4g}" if "rmse" in ref else ""))
    res = ndvm.search(task, proposer=args.proposer, budget=args.budget,
                      max_candidates=args.candidates_max, out=args.out, resume=args.resume,
                      seed=args.seed, candidates=args.candidates, workers=args.workers,
                      progress=not args.quiet, stop_on_success=args.stop, fit_options=fit_options,
                      **options)
    s = res.summary()
    print(f"{s['candidates']} candidates ({s['calibrated']} calibrated, {s['invalid']} invalid, "
          f"{s['failed']} failed) in {s['elapsed_seconds']:.1f}s, "
          f"{s['candidates_per_second'] or 0:.0f}/s; stopped: {s['stopped']}")
    fg = res.first_good
    if task.objective == "mse":
        print(f"first good fit: {fg['time']:.2f}s, candidate {fg['id']}, R2 {fg['r2']:.4f}"
              if fg else "no good fit within the budget")
    print("Pareto front (held-out error vs size):")
    print(report.front_table(res))
    if "series" in s:
        from ndvm.cosearch.series import describe
        print(describe(s["series"]))
    if args.out:
        written = report.write_plots(res, args.out)
        print(f"wrote {args.out}/candidates.jsonl, {args.out}/summary.json"
              + "".join(f", {p}" for p in written))
    return 0 if (fg is not None or task.objective == "nll") else 1


def cmd_bench(args):
    """Time warm evaluate-with-gradient calls at 1 and 256 lanes, and one calibration."""
    import time

    import ndvm
    from ndvm.cosearch.tasks import KALMAN_SRC, kalman_observations

    progs = {
        "damped_oscillator": ("(* A (* (exp (- 0 (* b t))) (cos (* omega t))))",
                              {"A": 1.0, "b": 0.3, "omega": 2.0, "t": 1.5}, {}),
        "logistic_map_loop": ("(loop ((x x0) (k 0)) (if (= k 16) x (recur (* r (* x (- 1.0 x)))"
                              " (+ k 1))))", {"r": 3.2, "x0": 0.4}, {}),
        "kalman2d_T80": (KALMAN_SRC, {"q": 0.05, "r": 0.1}, {"obs": kalman_observations()}),
    }

    def per_call(fn, repeat):
        fn()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            best.append((time.perf_counter() - t0) / repeat)
        return float(np.median(best)) * 1e6

    rng = np.random.default_rng(0)
    print("warm evaluate(grad=True) from Python, float64, µs per call")
    rows = []
    for name, (src, params, consts) in progs.items():
        prog = ndvm.parse(src, name)
        for client in ndvm.clients():
            ev = ndvm.Evaluator(client=client)
            times = []
            for lanes in (1, 256):
                p = {k: v if lanes == 1 else v * (1 + 0.01 * rng.standard_normal(lanes))
                     for k, v in params.items()}
                rep = max(4, args.repeat // (40 if consts else 1))
                times.append(per_call(lambda: ev.evaluate(prog, params=p, consts=consts,
                                                          grad=True), rep))
            rows.append([name, client, f"{times[0]:.1f}", f"{times[1]:.1f}",
                         f"{times[0] * 256 / times[1]:.1f}x"])
    print(_table(["program", "client", "1 lane", "256 lanes", "per-lane gain"], rows))
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    prog = ndvm.parse("(* a (* (exp (* b x)) (cos (* c x))))")
    t = per_call(lambda: ndvm.fit(prog, data={"x": x}, target=y, starts=8, steps=50),
                 max(4, args.repeat // 100))
    print(f"ndvm.fit, damped candidate, 64 points, 8 starts x 50 Adam steps: {t / 1e3:.2f} ms")
    return 0


def _budget(text):
    from ndvm.cosearch.loop import _parse_budget

    try:
        return _parse_budget(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser():
    p = argparse.ArgumentParser(prog="ndvm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate a program file", description=cmd_run.__doc__)
    r.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    r.add_argument("--param", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a parameter: one value, or one per start (differentiable)")
    r.add_argument("--data", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a data input: one value per data point")
    r.add_argument("--const", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a constant shared by all lanes (a number or a vector)")
    r.add_argument("--client", default="dmci", help="client (see ndvm.clients()); default dmci")
    r.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    r.add_argument("--compat", default=None, choices=["reference"],
                   help="reproduce the reference runtime's clamped sqrt/log")
    r.add_argument("--grad", action="store_true", help="also print gradients")
    r.set_defaults(func=cmd_run)
    d = sub.add_parser("disasm", help="show the bytecode a program compiles to",
                       description=cmd_disasm.__doc__)
    d.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    d.set_defaults(func=cmd_disasm)
    f = sub.add_parser("fit", help="calibrate a program's parameters to CSV data",
                       description=cmd_fit.__doc__)
    f.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    f.add_argument("csv", help="CSV file with a header row; columns named like the program's "
                               "free names are data inputs")
    f.add_argument("--target", required=True, help="the column to fit")
    f.add_argument("--params", help="comma-separated names to fit (default: the other free names)")
    f.add_argument("--init", action="append", type=_assignment, metavar="NAME=V",
                   help="a starting value (default: seeded normal(0, 0.3))")
    f.add_argument("--optimizer", default="lm", choices=["adam", "lbfgs", "lm"])
    f.add_argument("--steps", type=int, default=None, help="optimizer steps (default per optimizer)")
    f.add_argument("--starts", type=int, default=8, help="multi-start count (default 8)")
    f.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--client", default="dmci")
    f.add_argument("--plot", metavar="PNG", help="write the data and the fit as a PNG")
    f.set_defaults(func=cmd_fit)
    from ndvm.cosearch.tasks import TASKS

    s = sub.add_parser("search", help="search program structures for a task (co-search)",
                       description=cmd_search.__doc__)
    s.add_argument("--task", default="damped", choices=list(TASKS),
                   help="built-in task (default damped)")
    s.add_argument("--proposer", default="mutate", choices=["mutate", "replay", "llm"])
    s.add_argument("--budget", type=_budget, default=None,
                   help="time budget, e.g. 60s or 2m (default: the task's)")
    s.add_argument("--max-candidates", dest="candidates_max", type=int, default=None,
                   help="stop after this many candidates")
    s.add_argument("--candidates", action="append", metavar="FILE.jsonl",
                   help="candidate file for --proposer replay (objects with a \"src\" field)")
    s.add_argument("--out", metavar="DIR", help="write candidates.jsonl, summary.json and plots")
    s.add_argument("--resume", action="store_true", help="continue the run recorded in --out")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--stop", action="store_true", help="stop at the first good held-out fit")
    s.add_argument("--workers", type=int, default=None, help="calibration threads")
    s.add_argument("--starts", type=int, default=None, help="starts per calibration")
    s.add_argument("--steps", type=int, default=None, help="optimizer steps per calibration")
    s.add_argument("--optimizer", default=None, choices=["adam", "lbfgs", "lm"])
    s.add_argument("--llm-url", default=None, help="chat-completions base URL (or NDVM_LLM_URL)")
    s.add_argument("--llm-model", default="gpt-4o-mini")
    s.add_argument("--llm-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=cmd_search)
    b = sub.add_parser("bench", help="time warm evaluations and a calibration",
                       description=cmd_bench.__doc__)
    b.add_argument("--repeat", type=int, default=2000, help="calls per timing batch")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv=None):
    """Entry point of the ``ndvm`` command."""
    import ndvm

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ndvm.SchemeError as e:
        first = str(e).splitlines()
        print(f"ndvm: {first[0]}", file=sys.stderr)
        for line in first[1:]:
            print(f"  {line.strip()}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"ndvm: {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        location = getattr(e, "location", None)
        print(f"ndvm: {e}" if location else f"ndvm: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ndvm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

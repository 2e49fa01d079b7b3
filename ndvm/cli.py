"""The ndvm command line: run, fit, search, compare, bench and disasm.

Errors in user input (a missing file, bad program text, a bad option value) print one line
(file:line:col: kind: message) and exit with status 2; a search that finds no good fit, and a
fit whose loss is not finite, exit 1;
Ctrl-C exits 130 after writing what was done; SIGTERM (a batch system's notice at the end of a
job's time, ``kill``) the same, exiting 143.
"""
import argparse
import functools
import math
import os
import re
import signal
import sys
import threading
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["main"]


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where it arrives so that it stops what runs as Ctrl-C does."""


def _terminate(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (a second one ends the process at once)
    _TERMINATED.append(signum)
    raise Terminated


_TERMINATED = []  # (a SIGTERM arrived during this command)


def _stopped():
    """The line and exit status of a command stopped by Ctrl-C or SIGTERM."""
    return ("stopped by SIGTERM", 143) if _TERMINATED else ("interrupted", 130)


class InputError(ValueError):
    """A user-input error, its message starting with the place (file:line:col) when known."""


def _assignment(text):
    name, sep, values = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE[,VALUE...], got {text!r}")
    try:  # (an empty value, as in A=1,,2, is no number: it is not dropped in silence)
        parsed = [float(v) for v in values.split(",")] if values.strip() else []
    except ValueError:
        raise argparse.ArgumentTypeError(f"values of {name!r} must be numbers separated by "
                                         f"commas: {values!r}") from None
    if not parsed:
        raise argparse.ArgumentTypeError(f"{name!r} has no values")
    return name, parsed[0] if len(parsed) == 1 else np.array(parsed)


def example_path(name="damped_oscillator.scm"):
    """Path of an example program shipped with the package."""
    return Path(str(resources.files("ndvm") / "examples" / name))


def example_names():
    """The example files shipped with the package (programs and candidate files)."""
    return sorted(q.name for q in (resources.files("ndvm") / "examples").iterdir()
                  if q.name.endswith((".scm", ".jsonl")))


def _resolve(path):
    """A path, with ``example:NAME`` naming a file shipped in ndvm/examples."""
    if path.startswith("example:"):
        name = path.split(":", 1)[1]
        p = example_path(name)
        if not p.exists():
            shipped = ", ".join(example_names())
            raise InputError(f"{path}: no such example (shipped: {shipped})")
        return p
    return Path(path)


def _read_program(path):
    import ndvm

    if path == "-":
        return ndvm.parse(sys.stdin.read(), name="<stdin>")
    from ndvm.errors import utf8_text

    p = _resolve(path)
    try:
        text = utf8_text(p)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    return ndvm.parse(text, name=str(path))


def _unused(prog, what, names):
    """Warn about bound names the program does not use (they would be ignored silently)."""
    extra = [n for n in names if n not in prog.free_names]
    if extra:
        print(f"ndvm: warning: {prog.name} does not use {what} {', '.join(extra)} (its free "
              f"names: {', '.join(prog.free_names) or 'none'}); ignored", file=sys.stderr)


def _format_row(cells, widths):
    return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def cmd_run(args):
    """Evaluate a program file and print its values (and gradients with --grad)."""
    import ndvm

    prog = _read_program(args.file)
    params, data, consts = _bindings(args)
    for what, names in (("--param", params), ("--data", data), ("--const", consts)):
        _unused(prog, what, names)
    ev = ndvm.Evaluator(client=args.client, dtype=args.dtype, compat=args.compat,
                        max_steps=args.max_steps, max_depth=args.max_depth,
                        max_memory=args.max_memory)
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


def read_csv(path):
    """Columns of a CSV file with a header row: name -> float array (a units row is skipped)."""
    return read_table(path)[0]


UNITS_MARK = "#units"
MISSING = ("", "NA")  # cells read as a missing value (NaN): pandas' empty cell, R's NA


def read_table(path, finite=False,
               advice="a search needs finite data: remove or fill the row"):
    """(columns, units) of a CSV file with a header row: columns name -> float array (an empty
    cell or NA is a missing value, NaN); units name -> unit string from the optional units
    row, the line right under the header whose first cell starts with ``#units`` (then the
    first column's unit: ``#units kg,m/s,J``), else None. ``finite``: a missing, nan or inf
    cell is an error (file:line:column, and ``advice``); True for every column, or the names
    of the columns that must be finite."""
    import array
    import csv
    import itertools

    from ndvm.errors import utf8_text

    try:
        text = utf8_text(path)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    # (row by row, each column's numbers as packed doubles: every row read first as a list of
    # strings and every number as a float object took 622 MB and 7 s for a 47 MB file of
    # 10^6 rows of 4 columns)
    rows = csv.reader(_lines(text))
    top = next(rows, None)
    if top is None:
        raise InputError(f"{path}:1:1: the file is empty (expected a header row of column names)")
    header = [h.strip() for h in top]
    if any(not h for h in header):
        raise InputError(f"{path}:1:1: every column needs a name in the header row")
    for k, h in enumerate(header):  # (two columns of one name were read as one, twice as long)
        if h in header[:k]:
            raise InputError(f"{path}:1:1: two columns are named {h!r} (columns "
                             f"{header.index(h) + 1} and {k + 1}): rename one")
    units, first = None, 1
    second = next(rows, None)
    if second and second[0].strip().startswith(UNITS_MARK):
        row = [second[0].strip()[len(UNITS_MARK):].lstrip(":").strip()] + second[1:]
        if len(row) != len(header):
            raise InputError(f"{path}:2:1: the units row has {len(row)} fields for "
                             f"{len(header)} columns")
        units, first = {h: c.strip() for h, c in zip(header, row)}, 2
    elif second is not None:
        rows = itertools.chain([second], rows)
    fast = _plain_numbers(path, text, first, header, finite)
    if fast is not None:
        return fast, units
    cols = {h: array.array("d") for h in header}
    for i, row in enumerate(rows, first + 1):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{path}:{i}:1: expected {len(header)} fields, got {len(row)}")
        col = 1
        for h, cell in zip(header, row):
            missing = cell.strip() in MISSING  # (pandas writes NaN as an empty cell, R as NA)
            try:
                v = math.nan if missing else float(cell)
            except ValueError:
                raise InputError(f"{path}:{i}:{col}: column {h!r}: expected a number, "
                                 f"got {cell.strip()!r}") from None
            cols[h].append(v)
            if finite and (finite is True or h in finite) and not math.isfinite(v):
                what = (f"a missing value ({cell.strip()!r})" if missing
                        else f"{cell.strip()} is not a finite number")
                raise InputError(f"{path}:{i}:{col}: column {h!r}: {what} ({advice})")
            col += len(cell) + 1
    if not cols[header[0]]:
        raise InputError(f"{path}:{first + 1}:1: no data rows")
    return {h: np.array(v, dtype=np.float64) for h, v in cols.items()}, units


def _plain_numbers(path, text, first, header, finite):
    """read_table's columns of the file ``path`` (its text ``text``) read past its first
    ``first`` lines by numpy's reader in one pass, when every row is len(header) numbers and
    every cell that must be finite is; else None: a file with a missing value, a blank or
    ragged row, a cell that is not a number or a non-finite one where ``finite`` forbids it is
    read row by row, which says where and why. (The same numbers: numpy's reader rounds a
    decimal as float() does; a 50 MB file of 200,000 rows of 10 columns was read in ~3x less
    time than row by row, with a third of the file's size beside its text.)"""
    import warnings

    at = 0
    for _ in range(first):
        at = text.find("\n", at) + 1
        if at == 0:
            return None
    if '"' in text[:at] or text.count("\r") != text.count("\r\n"):
        return None  # (a quoted name may hold a line end; a lone carriage return ends a line)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (numpy's "empty input" warning: None below)
            table = np.loadtxt(path, dtype=np.float64, delimiter=",", comments=None,
                               quotechar='"', skiprows=first, ndmin=2, encoding="utf-8")
    except ValueError:
        return None
    if table.shape[0] == 0 or table.shape[1] != len(header):
        return None
    cols = {h: np.ascontiguousarray(table[:, k]) for k, h in enumerate(header)}
    must = header if finite is True else [h for h in header if finite and h in finite]
    if any(not np.isfinite(cols[h]).all() for h in must):
        return None
    return cols


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _lines(text):
    """The lines of ``text`` with their ends, one at a time, split where a file opened with
    newline="" splits them (after a line feed, a carriage return or both): csv.reader's input,
    without a copy of the whole text."""
    for m in _LINE.finditer(text):
        yield m.group()


def csv_task(path, target=None):
    """A search task fitting the column ``target`` (default: the last) of a CSV file from its
    other columns; the units row, when there is one, gives the task its units."""
    from ndvm.cosearch.task import Task

    cols, units = read_table(path, finite=True)
    target = target or list(cols)[-1]
    if target not in cols:
        raise InputError(f"{path}:1:1: no column {target!r} (columns: {', '.join(cols)})")
    inputs = {k: v for k, v in cols.items() if k != target}
    if not inputs:
        raise InputError(f"{path}:1:1: no input columns besides the target {target!r}")
    if units is not None:
        units = {**{k: units[k] for k in inputs}, "target": units[target]}
    try:
        return Task.from_arrays(Path(path).stem, inputs, cols[target], heldout=0.3, seed=0,
                                loops=False, data_units=units, target_name=target,
                                description=f"{target} as a function of {', '.join(inputs)} "
                                            f"({path})")
    except ValueError as e:
        raise InputError(f"{path}:{2 if units else 1}:{_header_column(path, cols, e)}: "
                         f"{e}") from None


def _header_column(path, cols, error):
    """The column (1-based character) of the header's name that ``error`` names, else 1."""
    named = [k for k, h in enumerate(cols) if repr(h) in str(error)]
    if not named:
        return 1
    from ndvm.errors import utf8_text

    import csv

    line = utf8_text(path).lstrip("\ufeff").split("\n", 1)[0]
    at = 0  # (each field found in the line as written, after the last: quotes and all)
    for k, field in enumerate(next(csv.reader([line]), [])):
        at = max(line.find(field.strip(), at), at) if field.strip() else at
        if k == named[0]:
            return at + 1
        at += len(field.strip())
    return 1


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
    if args.target in prog.free_names and (not args.params or args.target not in
                                           args.params.split(",")):
        others = ", ".join(c for c in cols if c != args.target)
        raise InputError(f"{args.file}: the program reads {args.target!r}, the target column: a "
                         f"model of {args.target} cannot take it as an input (name the program's "
                         f"inputs after the other columns: {others})")
    data = {k: v for k, v in cols.items() if k in prog.free_names and k != args.target}
    if args.nan_policy != "omit" and not all(np.isfinite(v).all() for v in (y, *data.values())):
        read_table(args.csv, finite={args.target, *data},  # (raises, naming the line and cell)
                   advice="remove or fill the row, or drop such rows: --nan-policy omit")
    params = args.params.split(",") if args.params else None
    init = _named(args.init, "--init")
    from ndvm.fit import FitOptions, did_you_mean, finite_rows, fit_with, missing_inputs

    unused = [c for c in cols if c not in data]  # columns the program does not read
    others = [c for c in unused if c != args.target]
    if not data and others and params is None:  # (ndvm.fit's rule: a fit that reads no data)
        near = "".join(f"; {n!r}{did_you_mean(n, others).replace(' (did you mean', ' (column')}"
                       for n in prog.free_names if did_you_mean(n, others))
        raise InputError(f"{args.csv}:1:1: the program reads none of the columns "
                         f"({', '.join(others)}); its free names are "
                         f"{', '.join(prog.free_names) or '(none)'}: every one would be fitted "
                         f"as a constant{near}; name a column as the program names its input "
                         f"(or give --params to fit constants on purpose)")
    left_out = dict(missing_inputs(prog.free_names, data)) if params is None else {}
    for name in prog.free_names:
        if name in data or (params is not None and name not in params):
            continue
        hint = did_you_mean(name, unused)
        if hint:  # a free name with no column of its own, close to a column's name: a typo?
            print(f"ndvm: warning: {name!r} matches no CSV column and is fitted as a parameter"
                  f"{hint.replace('(did you mean', '(did you mean column')}", file=sys.stderr)
        elif name in left_out:  # (x3 beside columns x1, x2)
            print(f"ndvm: warning: {name!r} matches no CSV column and is fitted as a parameter "
                  f"(the program reads {', '.join(left_out[name])}; give --params to fit it on "
                  f"purpose)", file=sys.stderr)
    options = FitOptions.of(params=params, starts=args.starts, init=init or None,
                            optimizer=args.optimizer, steps=args.steps, lr=args.lr,
                            seed=args.seed, client=args.client, nan_policy=args.nan_policy)
    res = fit_with(prog, options, data, y, quiet_inputs=True)
    rows_ok = finite_rows(y, data)  # with --nan-policy omit: the rows the fit used
    if not rows_ok.all():
        data = {k: v[rows_ok] for k, v in data.items()}
        y = y[rows_ok]
        print(f"ndvm: {int((~rows_ok).sum())} row(s) with NaN or inf omitted", file=sys.stderr)
    pred = ndvm.Evaluator(client=args.client).evaluate(prog, params=res.params, data=data).value[0]
    with np.errstate(all="ignore"):  # (a fit that failed: its loss says so, below)
        r2 = (1.0 - float(np.mean((pred - y) ** 2)) / float(np.var(y)) if np.var(y) > 0
              else float("nan"))
    stderr = getattr(res, "stderr", None)  # standard errors, when ndvm.fit provides them
    print(f"{prog.name}: fitted {', '.join(res.names)} to {args.target} over {y.size} rows "
          f"(data: {', '.join(data) or 'none'}); {args.optimizer}, {args.starts} start(s), "
          f"{res.n_evals} evaluations")
    if stderr:
        rows = [[k, f"{v:.10g}", f"{stderr.get(k, float('nan')):.6g}"]
                for k, v in res.params.items()]
        print(_table(["parameter", "value", "std. error"], rows))
    else:
        print(_table(["parameter", "value"], [[k, f"{v:.10g}"] for k, v in res.params.items()]))
    print(f"loss (MSE) {res.loss:.10g}   R2 {r2:.10g}")
    print(f"{'converged' if res.converged[res.best_start] else 'NOT converged'}: {res.message}")
    if args.plot:
        from ndvm.cosearch import report

        plt = report._pyplot()
        if plt is None:
            print("ndvm: matplotlib is not installed (pip install 'ndvm[plot]'); no plot written",
                  file=sys.stderr)
        else:
            fig = report.fit_figure(prog, res.params, data, y, args.target, r2, stderr,
                                    client=args.client)
            fig.savefig(args.plot, dpi=110)
            plt.close(fig)
            print(f"wrote {args.plot}")
    return 0 if math.isfinite(res.loss) else 1  # (no finite loss: the fit failed)


def _list_builtins():
    from ndvm.cosearch.tasks import TASKS

    print("built-in tasks (ndvm search --task NAME):")
    for name, make in TASKS.items():
        try:
            t = make()
        except ImportError as e:  # (a task whose data needs an extra: listed, with what it needs)
            print(f"  {name:<11} {str(e).splitlines()[0]}")
            continue
        props = list(getattr(t, "proposers", ("mutate", "replay", "llm")))
        budget = f"{t.budget_seconds:g}s" if t.budget_seconds else "none"
        print(f"  {name:<11} {t.description}")
        print(f"  {'':<11} objective {t.objective}; parameters {', '.join(t.params)}; "
              f"proposers {', '.join(props)} (default {props[0]}); default budget {budget}")
    print("example files (use as example:NAME, e.g. ndvm run example:damped_oscillator.scm):")
    for name in example_names():
        print(f"  {name:<26} {example_path(name)}")
    return 0


def _dask_client(address):
    """A Dask client connected to the scheduler at ``address`` (tcp://HOST:PORT), or an
    InputError saying why there is none."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask's distributed package: "
                         "pip install 'ndvm[dask]'") from None
    try:
        return Client(address, timeout="10s")
    except Exception as e:  # noqa: BLE001 - unreachable, refused or malformed: say which
        from ndvm._core._core import first_line

        raise InputError(f"cannot connect to the Dask scheduler at {address}: "
                         f"{first_line(e)}") from None


def cmd_search(args):
    """Search program structures for a task and print the Pareto front (error vs size).

    A proposer suggests programs; each one's constants are calibrated to the training points
    and it is scored on held-out points. With --out DIR, every candidate is appended to
    DIR/candidates.jsonl as it is scored, and summary.json, front.png and fits.png are written
    at the end (also after Ctrl-C).
    """
    import ndvm
    from ndvm.cosearch import report
    from ndvm.cosearch.resume import check_run
    from ndvm.cosearch.tasks import get_task

    if args.list:
        return _list_builtins()
    if args.csv and args.task:
        raise InputError("give a built-in --task or a --csv file, not both")
    if args.target and not args.csv:
        raise InputError("--target names a column of the --csv file; give --csv FILE")
    try:
        task = csv_task(args.csv, args.target) if args.csv else get_task(args.task or "damped")
    except ImportError as e:  # a task whose data needs an extra (the series need statsmodels)
        raise InputError(str(e)) from None
    options = {}
    if args.proposer == "llm":
        options = {"base_url": args.llm_url, "model": args.llm_model, "key_env": args.llm_key_env}
    fit_options = {k: v for k, v in (("starts", args.starts), ("steps", args.steps),
                                     ("optimizer", args.optimizer)) if v is not None}
    candidates = [str(_resolve(c)) for c in args.candidates] if args.candidates else None
    nll = task.objective == "nll"
    # (refused before printing)
    check_run(task, args.proposer, args.out, args.resume, args.force, args.islands)
    print(f"task {task.name}: {task.description}")
    if nll:
        print(f"  a likelihood task: each candidate's parameters ({', '.join(task.params)}) are "
              f"fitted by maximum likelihood; lower NLL is better")
    else:
        good = ("any finite held-out error" if task.threshold is None
                else f"held-out R2 > {task.threshold:.4g}")
        print(f"  {task.train.size} training / {task.heldout.size} held-out points; a good fit "
              f"has {good}; parameters {', '.join(task.params)}")
    for ref in task.references():  # fitted here, in the same run (series: the ARIMA baseline)
        print(f"  reference: {ref['label']}: held-out MSE {ref['heldout_error']:.4g}"
              + (f", RMSE {ref['rmse']:.4g}" if "rmse" in ref else ""))
    cluster = None
    if args.scheduler:
        if args.workers is not None:
            raise InputError("--workers sets local threads (processes with --islands); with "
                             "--scheduler the cluster's workers run: give one or the other")
        from ndvm.schedule import cluster_threads

        cluster = _dask_client(args.scheduler)
        threads = sum(cluster_threads(cluster).values())
        print(f"  calibrating on the Dask cluster at {args.scheduler} ({threads} worker "
              f"thread{'' if threads == 1 else 's'})")
    try:
        res = ndvm.search(task, proposer=args.proposer, budget=args.budget,
                          max_candidates=args.candidates_max, out=args.out, resume=args.resume,
                          force=args.force, seed=args.seed, candidates=candidates,
                          workers=args.workers, progress=not args.quiet,
                          stop_on_success=args.stop, fit_options=fit_options,
                          executor=cluster.get_executor() if cluster else None,
                          islands=args.islands, migration_every=args.migration_every,
                          migrants=args.migrants, batch=args.batch,
                          simple_constants=not args.fitted_constants, **options)
    finally:
        if cluster is not None:
            cluster.close()
    s = res.summary()
    if args.quiet:
        for w in dict.fromkeys(res.warnings):
            print(f"ndvm: warning: {w}", file=sys.stderr)
    why = s["stopped"]
    if why == "proposer failed" and res.warnings:
        why += f" ({res.warnings[-1]})"
    print(f"{s['candidates']} candidate{'' if s['candidates'] == 1 else 's'} "
          f"({s['calibrated']} calibrated, {s['invalid']} invalid, "
          f"{s['failed']} failed) in {s['elapsed_seconds']:.1f}s, "
          f"{s['candidates_per_second'] or 0:.0f}/s; stopped: {why}")
    fg = res.first_good
    if not nll:
        print(f"first good fit: {fg['time']:.2f}s, candidate {fg['id']}, R2 {fg['r2']:.4f}"
              if fg else "no good fit within the budget")
    print("Pareto front (NLL vs size):" if nll else "Pareto front (held-out error vs size):")
    print(report.front_table(res))
    chosen = report.selection_text(res)
    if chosen:
        print(chosen)
    if "series" in s:
        from ndvm.cosearch.series import describe
        print(describe(s["series"]))
    if args.out:
        out = Path(args.out)
        written = report.write_plots(res, out)
        print("wrote " + ", ".join(str(p) for p in [out / "candidates.jsonl",
                                                     out / "summary.json"] + written))
    if res.stopped == "interrupted":
        what, status = _stopped()
        again = ""
        if args.out:
            again = f"; --resume continues it from {args.out}"
        print(f"ndvm: {what}; the results above are from what was done{again}", file=sys.stderr)
        return status
    if res.stopped == "executor lost":  # (its warning, shown above, says what was lost)
        again = f"; --resume continues it from {args.out} once it is back" if args.out else ""
        print(f"ndvm: the search lost its executor; the results above are from what was "
              f"done{again}", file=sys.stderr)
        return 1
    return 0 if (fg is not None or nll) else 1


def _bindings(args):
    return (_named(args.param, "--param"), _named(args.data, "--data"),
            _named(args.const, "--const"))


def _named(pairs, flag):
    """The NAME=VALUE pairs of a repeated flag as a dict; InputError for a name given twice (the
    last one was taken without a word)."""
    out = {}
    for name, value in pairs or []:
        if name in out:
            raise InputError(f"{flag} {name}= is given twice: give each name once")
        out[name] = value
    return out


def cmd_compare(args):
    """Run a program on every client (and the eager torch baselines), check that values and
    gradients agree, and time each at 1 and 256 starts (parameter vectors) with a per-lane cost.
    """
    import json

    import ndvm

    prog = _read_program(args.file)
    params, data, consts = _bindings(args)
    for what, names in (("--param", params), ("--data", data), ("--const", consts)):
        _unused(prog, what, names)
    table = ndvm.compare(prog, params=params, data=data or None, consts=consts or None,
                         starts=args.starts or [1, 256],
                         baselines=[] if args.no_baselines else None)
    if args.json:
        print(json.dumps({"program": prog.name, "reference": table.reference,
                          "agree": table.agree, "rows": table.to_dicts()}, indent=2))
    else:
        print(f"{prog.name}: free names {', '.join(prog.free_names) or '(none)'}")
        print(table)
    return 0 if table.agree else 1


def cmd_bench(args):
    """Time warm evaluate-with-gradient calls at 1 and 256 lanes, and one calibration.

    With a program file (ndvm bench FILE.scm --param ...), the same as ndvm compare.
    """
    import json
    import time

    if args.file is not None:
        return cmd_compare(args)
    given = [flag for flag, v in (("--param", args.param), ("--data", args.data),
                                  ("--const", args.const), ("--starts", args.starts),
                                  ("--no-baselines", args.no_baselines)) if v]
    if given:  # (they are a program file's: without one they would be ignored)
        raise InputError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for "
                         f"timing your own program: give its file (ndvm bench FILE.scm "
                         f"{given[0]} ...); without a file, ndvm bench times its own programs")

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
    if not args.json:
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
            rows.append((name, client, times[0], times[1]))
    if not args.json:
        print(_table(["program", "client", "1 lane", "256 lanes", "per-lane gain"],
                     [[n, c, f"{a:.1f}", f"{b:.1f}", f"{a * 256 / b:.1f}x"]
                      for n, c, a, b in rows]))
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    prog = ndvm.parse("(* a (* (exp (* b x)) (cos (* c x))))")
    t = per_call(lambda: ndvm.fit(prog, data={"x": x}, target=y, starts=8, steps=50,
                                  optimizer="adam"),
                 max(4, args.repeat // 100))
    what = "ndvm.fit, damped candidate, 64 points, 8 starts x 50 Adam steps"
    if args.json:
        print(json.dumps({"evaluate_grad_us": [
            {"program": n, "client": c, "lanes_1": round(a, 3), "lanes_256": round(b, 3),
             "per_lane_gain": round(a * 256 / b, 3)} for n, c, a, b in rows],
            "fit": {"what": what, "ms": round(t / 1e3, 4)}}, indent=2))
    else:
        print(f"{what}: {t / 1e3:.2f} ms")
    return 0


def _budget(text):
    from ndvm.cosearch.loop import parse_budget

    try:
        return parse_budget(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _plot_file(text):
    """--plot's file: .png added when the name has no extension (matplotlib adds it, and
    "wrote fit" named a file that was not there); a folder is refused."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name, as in "
                                         f"{path / 'fit.png'}")
    return str(path) if path.suffix else str(path) + ".png"


def _start_counts(text):
    """--starts' comma-separated start counts, each a whole number above 0."""
    try:
        out = [_positive_int(v) for v in text.split(",") if v.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"start counts are whole numbers above 0, as in 1,256 "
                                         f"({e})") from None
    if not out:
        raise argparse.ArgumentTypeError(f"no start count in {text!r} (as in 1,256)")
    return out


def _whole_number(text, least, below):
    """An option's whole number of at least ``least`` (``below``: the message of one less,
    formatted with the value as ``v``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(below.format(v=v))
    return v


def _seed_arg(text):
    """--seed: a whole number >= 0 (numpy's seeds)."""
    return _whole_number(text, 0, "a seed is a whole number >= 0, got {v}")


def _count_arg(text):
    return _whole_number(text, 0, "must be a whole number >= 0, got {v}")


def _positive_int(text):
    return _whole_number(text, 1, "must be positive, got {v}")


def _program_inputs(p, param_help="a parameter: one value, or one per start (differentiable)"):
    p.add_argument("--param", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help=param_help)
    p.add_argument("--data", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a data input: one value per data point")
    p.add_argument("--const", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a constant shared by all lanes (a number or a vector)")


def _client_option(p):
    import ndvm

    p.add_argument("--client", default="dmci", choices=ndvm.clients(),
                   help="the evaluator: dmci (tree-walking) or bytecode (stack VM); default dmci")


EPILOG = """examples:
  ndvm run example:damped_oscillator.scm --param A=1 --param b=0.3 --param omega=2 \\
      --data t=0,1,2 --grad
  ndvm fit model.scm data.csv --target y --plot fit.png
  ndvm search --list
  ndvm search --task damped --budget 60s --out run/
  ndvm search --task damped --proposer replay --candidates example:proposals.jsonl
  ndvm compare model.scm --param a=1 --data x=0.5,1.0

exit status: 0 done; 1 no good fit (search), no finite loss (fit) or clients disagree
(compare); 2 a usage or input error (one line saying where); 130 interrupted (a search still
writes what it did); 143 stopped by SIGTERM (the same)
"""


def build_parser():
    import ndvm
    from ndvm.parallel import EXECUTOR_BATCH

    # (no abbreviations: ``ndvm fit --param a=1`` read as fit's --params, a name list)
    parser = functools.partial(argparse.ArgumentParser, allow_abbrev=False)
    p = parser(prog="ndvm", description=__doc__.split("\n\n")[0], epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ndvm {ndvm.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=parser)
    p.commands = sub.choices  # (name -> its parser: _parse's errors are its command's)
    r = sub.add_parser("run", help="evaluate a program file", description=cmd_run.__doc__)
    r.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    _program_inputs(r)
    _client_option(r)
    r.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                   help="number type of the lanes (default float64)")
    r.add_argument("--compat", default=None, choices=["reference"],
                   help="reproduce the reference runtime's clamped sqrt/log")
    r.add_argument("--grad", action="store_true", help="also print gradients")
    r.add_argument("--max-steps", type=_positive_int, default=10_000_000,
                   help="evaluation step limit (default 10000000)")
    r.add_argument("--max-depth", type=_positive_int, default=10_000,
                   help="nested (non-tail) call depth limit (default 10000)")
    r.add_argument("--max-memory", type=_positive_int, default=2 << 30,
                   help="lane and tape memory limit in bytes (default 2 GiB)")
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
    f.add_argument("--optimizer", default="lm", choices=["adam", "lbfgs", "lm"],
                   help="lm (Levenberg-Marquardt, default), lbfgs or adam")
    f.add_argument("--steps", type=_positive_int, default=None,
                   help="lm and lbfgs: the budget of evaluations (default 100 (P + 1), P "
                        "the fitted parameters); adam: the number of steps (default 50)")
    f.add_argument("--starts", type=_positive_int, default=8, help="multi-start count (default 8)")
    f.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    f.add_argument("--seed", type=_seed_arg, default=0, help="seed of the random starts (default 0)")
    f.add_argument("--nan-policy", default="raise", choices=["raise", "omit"],
                   help="rows with NaN or inf in a used column: an error (raise, default) or "
                        "left out of the fit (omit)")
    _client_option(f)
    f.add_argument("--plot", metavar="PNG", type=_plot_file,
                   help="write the data, the fit and its residuals (a file name; .png when it "
                        "has no extension)")
    f.set_defaults(func=cmd_fit)
    from ndvm.cosearch.tasks import TASKS

    s = sub.add_parser("search", help="search program structures for a task (co-search)",
                       description=cmd_search.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--list", action="store_true",
                   help="list the built-in tasks (with their default proposer and budget) and "
                        "the shipped example files, then exit")
    s.add_argument("--task", default=None, choices=list(TASKS),
                   help="built-in task (default damped; see --list)")
    s.add_argument("--csv", metavar="FILE",
                   help="search a model of one column of this CSV file (header row of names) "
                        "from the others; an optional units row right under the header, its "
                        "first cell starting with #units (e.g. header m,v,E then the line "
                        "'#units kg,m/s,J'), gives every column's unit: the search then keeps "
                        "to dimensionally consistent models and starts from the Buckingham Pi "
                        "ones")
    s.add_argument("--target", default=None,
                   help="the --csv column to model (default: the last)")
    s.add_argument("--proposer", default=None, choices=["mutate", "replay", "llm"],
                   help="where candidates come from: mutate (genetic programming), replay "
                        "(--candidates files, else the task's seed programs) or llm; default "
                        "the task's (mutate for damped and recurrence, replay for kalman and "
                        "nile)")
    s.add_argument("--budget", type=_budget, default=None,
                   help="time budget, e.g. 60s, 2m or 1h (default: the task's: 60s for damped "
                        "and recurrence, 10s for kalman and nile)")
    s.add_argument("--max-candidates", dest="candidates_max", type=_positive_int, default=None,
                   metavar="N", help="stop after this many candidates")
    s.add_argument("--candidates", action="append", metavar="FILE.jsonl",
                   help="candidate file for --proposer replay (objects with a \"src\" field; "
                        "given, the proposer is replay unless another is named, an error); a "
                        "sample ships as example:proposals.jsonl")
    s.add_argument("--out", metavar="DIR", help="write candidates.jsonl, summary.json and plots")
    s.add_argument("--resume", action="store_true",
                   help="continue the run recorded in --out (with the same task, seed and "
                        "batch; an island search's with the same --islands, --migration-every "
                        "and --migrants)")
    s.add_argument("--force", action="store_true",
                   help="replace the run already recorded in --out")
    s.add_argument("--seed", type=_seed_arg, default=0,
                   help="seed of the proposer (same seed, same candidates; default 0)")
    s.add_argument("--stop", action="store_true", help="stop at the first good held-out fit")
    s.add_argument("--workers", type=_positive_int, default=None,
                   help="threads the search runs on (default: every core; 1: all on one "
                        "thread, the same candidates and results); with --islands, worker "
                        "processes")
    s.add_argument("--islands", type=_positive_int, default=1,
                   help="populations searched apart in worker processes (or on --scheduler's "
                        "cluster), passing their best members on every --migration-every "
                        "candidates; the same results for a seed and a number of islands on any "
                        "number of workers (default 1: one population, whose proposing runs on "
                        "one thread: on more than a few cores, give as many islands as cores)")
    s.add_argument("--migration-every", type=_positive_int, default=256,
                   help="candidates an island proposes between migrations (default 256)")
    s.add_argument("--migrants", type=_count_arg, default=4,
                   help="best members an island passes on at each migration (default 4; 0: "
                        "islands searched wholly apart)")
    s.add_argument("--fitted-constants", action="store_true",
                   help="keep the chosen model's constants as fitted (by default one within "
                        "the data's uncertainty of a small integer or a half is written as it, "
                        "and the model refitted: docs/search.md, the model selection)")
    s.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                   help="calibrate on the Dask cluster of this scheduler instead of local "
                        "threads (needs ndvm[dask]); the same results as a local run of the "
                        "same --batch")
    s.add_argument("--batch", type=_positive_int, default=None,
                   help=f"candidates proposed and calibrated a round (default 16; a single "
                        f"population's on --scheduler: {EXECUTOR_BATCH} for each worker thread "
                        "of the cluster, so that Dask's cost a task stays small): a seed and a "
                        "batch give the same candidates wherever they run, so give a cluster "
                        "run's batch to repeat it locally, or to resume it on a cluster of "
                        "another size (summary.json's settings say it)")
    s.add_argument("--starts", type=_positive_int, default=None,
                   help="starts per calibration (default: the task's)")
    s.add_argument("--steps", type=_positive_int, default=None,
                   help="optimizer steps per calibration (default: the task's)")
    s.add_argument("--optimizer", default=None, choices=["adam", "lbfgs", "lm"],
                   help="calibration optimizer (default: the task's: lm for --csv, adam "
                        "for damped, the paper's protocol)")
    s.add_argument("--llm-url", default=None,
                   help="chat-completions base URL (default $NDVM_LLM_URL, else "
                        "https://api.openai.com/v1)")
    s.add_argument("--llm-model", default="gpt-4o-mini",
                   help="model name sent to the endpoint (default gpt-4o-mini)")
    s.add_argument("--llm-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key (default OPENAI_API_KEY)")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=cmd_search)
    c = sub.add_parser("compare", help="check and time your program on every client",
                       description=cmd_compare.__doc__)
    _compare_options(c, required=True)
    c.set_defaults(func=cmd_compare)
    b = sub.add_parser("bench", help="time warm evaluations and a calibration (or, given a "
                                     "program file, the same as compare)",
                       description=cmd_bench.__doc__)
    b.add_argument("--repeat", type=_positive_int, default=2000,
                   help="calls per timing batch (default 2000)")
    _compare_options(b, required=False)
    b.set_defaults(func=cmd_bench)
    return p


def _compare_options(p, required):
    p.add_argument("file", nargs=None if required else "?",
                   help="program file (.scm), '-' for stdin, or example:NAME")
    _program_inputs(p, param_help="a parameter: one value (the starts of each of --starts' "
                                  "counts are made from it)")
    p.add_argument("--starts", default=None, type=_start_counts,
                   help="comma-separated start counts to time (default 1,256)")
    p.add_argument("--no-baselines", action="store_true",
                   help="skip the eager torch baselines")
    p.add_argument("--json", action="store_true", help="print the table as JSON")


def _parse(parser, argv):
    """``parser.parse_args(argv)``, an argument no command takes refused by its command's parser
    with the near option named (``ndvm fit --param``: did you mean --params?)."""
    import difflib

    args, extra = parser.parse_known_args(argv)
    if extra:
        command = parser.commands[args.command]
        hint = ""
        for a in extra:
            near = difflib.get_close_matches(a.partition("=")[0], command._option_string_actions,
                                             n=1) if a.startswith("-") else []
            if near:
                hint = f" (did you mean {near[0]}?)"
                break
        command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _split_negative(argv):
    """``--budget -5s`` as ``--budget=-5s``, so the value reaches its check."""
    out, it = [], iter(argv)
    for a in it:
        if a in ("--budget", "--max-candidates") :
            nxt = next(it, None)
            if nxt is not None and nxt.startswith("-") and nxt[1:2].isdigit():
                out.append(f"{a}={nxt}")
                continue
            out.append(a)
            if nxt is not None:
                out.append(nxt)
            continue
        out.append(a)
    return out


def main(argv=None):
    """Entry point of the ``ndvm`` command."""
    import ndvm
    from ndvm.cosearch.proposers import CandidateFileError
    from ndvm.schedule import ExecutorLost

    argv = _split_negative(sys.argv[1:] if argv is None else list(argv))
    args = _parse(build_parser(), argv)
    _TERMINATED.clear()
    on_term = None
    if threading.current_thread() is threading.main_thread():
        on_term = signal.signal(signal.SIGTERM, _terminate)
    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except ndvm.SchemeError as e:
        first = str(e).splitlines()
        print(f"ndvm: {first[0]}", file=sys.stderr)
        for line in first[1:]:
            print(f"  {line.strip()}", file=sys.stderr)
        if isinstance(e, ndvm.LimitError) and args.command == "run":
            print("  (on the command line: ndvm run --max-steps N / --max-depth N / "
                  "--max-memory BYTES)", file=sys.stderr)
        return 2
    except (InputError, CandidateFileError) as e:
        print(f"ndvm: {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        print(f"ndvm: error: {e}", file=sys.stderr)
        return 2
    except ExecutorLost as e:  # (before the search had anything: it ends with what came back)
        print(f"ndvm: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # (the reader of the output left: `| head`): quiet, as shells are
        try:
            sys.stdout = open(os.devnull, "w")  # (nothing more to flush into the closed pipe)
        except OSError:
            pass
        return 141
    except (ConnectionError, TimeoutError) as e:  # (a socket's, no file's: a cluster's, say)
        print(f"ndvm: error: a connection was lost: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # an output path that cannot be written
        where = f"{e.filename}: " if e.filename else ""
        print(f"ndvm: error: cannot write {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        what, status = _stopped()
        print(f"ndvm: {what}", file=sys.stderr)
        return status
    finally:
        warnings.showwarning = shown
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning on the command line: one "ndvm: warning:" line, as the command's own, not
    Python's file:line and source line (a UserWarning of the library while a command runs)."""
    print(f"ndvm: warning: {str(message).removeprefix('ndvm: ')}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

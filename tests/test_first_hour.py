"""What a new user meets in the first hour: every built-in task and option, the messages, exit
codes, files written, the plots' contents, ``ndvm compare`` and the benchmark suite's imports."""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

import ndvm
from ndvm.cosearch import report
from ndvm.cosearch.loop import RunExistsError, SearchResult
from ndvm.cosearch.task import Task
from ndvm.cosearch.tasks import TASKS, get_task
from conftest import local_http, ndvm_taking_ctrl_c
from test_cli import ndvm as cli

ROOT = Path(__file__).resolve().parents[1]


# -- every built-in task with every proposer that applies ------------------------------------------

class _Stub(BaseHTTPRequestHandler):
    status = 200
    body = b""

    def do_POST(self):  # noqa: N802 - the http.server interface
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(type(self).status)
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    with local_http(_Stub) as url:
        yield url


def _answer(text):
    _Stub.status = 200
    _Stub.body = json.dumps({"choices": [{"message": {"content": text}}]}).encode()


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_runs_with_its_default_proposer(name, tmp_path):
    task = get_task(name)
    res = ndvm.search(name, max_candidates=16, budget="20s", out=tmp_path / "run")
    assert res.proposer == task.proposers[0]
    assert res.n_calibrated >= 1 and res.best is not None
    assert math.isfinite(res.best["heldout_error"])
    assert (tmp_path / "run" / "candidates.jsonl").stat().st_size > 0


@pytest.mark.parametrize("name, proposer", [(t, p) for t in TASKS for p in get_task(t).proposers])
def test_every_task_with_every_applicable_proposer(name, proposer, stub):
    task = get_task(name)
    options = {}
    if proposer == "llm":
        _answer("\n".join(task.seeds))
        options = {"base_url": stub, "max_calls": 1, "key_env": None}
    res = ndvm.search(name, proposer=proposer, max_candidates=8, budget="20s", **options)
    assert res.records and res.stopped in ("candidates", "exhausted")
    assert res.n_calibrated >= 1, [r.get("error") for r in res.records]


@pytest.mark.parametrize("name", [t for t in TASKS if "mutate" not in get_task(t).proposers])
def test_a_proposer_that_does_not_apply_is_one_line_naming_those_that_do(name):
    r = cli("search", "--task", name, "--proposer", "mutate", "--quiet")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "mutate" in lines[0] and "replay" in lines[0], r.stderr


@pytest.mark.parametrize("name", ["nile", "kalman"])
def test_likelihood_tasks_from_the_command_line(name, tmp_path):
    out = tmp_path / "run"
    r = cli("search", "--task", name, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "NLL" in r.stdout and "held-out" not in r.stdout
    progress = [x for x in r.stderr.splitlines() if "best NLL" in x]
    assert len(progress) == 1, r.stderr  # printed once, not twice
    assert (out / "candidates.jsonl").stat().st_size > 0
    assert (out / "front.png").read_bytes()[:4] == b"\x89PNG"


# -- the llm proposer says why it failed -----------------------------------------------------------

@pytest.mark.parametrize("status, body, expect", [
    (401, b'{"error": "bad key"}', "HTTP 401"),
    (200, b"<html>not json</html>", "not JSON"),
    (200, b'{"id": 1}', 'no "choices"'),
])
def test_llm_failures_are_reported(stub, status, body, expect, tmp_path):
    _Stub.status, _Stub.body = status, body
    res = ndvm.search("damped", proposer="llm", base_url=stub, budget="20s",
                      out=tmp_path / "run")
    assert res.stopped == "proposer failed"
    assert res.warnings and expect in res.warnings[-1]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert any(expect in w for w in summary["warnings"])


def test_llm_unreachable_endpoint_prints_the_reason(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    r = cli("search", "--proposer", "llm", "--llm-url", f"http://127.0.0.1:{port}/v1",
            "--budget", "20s", "--out", str(out))
    assert "cannot connect" in r.stderr and f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert "stopped: proposer failed (llm request failed: cannot connect" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "proposer failed"
    assert "cannot connect" in summary["warnings"][0]


# -- the run directory: refuse to overwrite, Ctrl-C keeps the results ------------------------------

def test_an_existing_run_directory_is_not_overwritten(tmp_path):
    out = tmp_path / "run"
    r = cli("search", "--max-candidates", "16", "--out", str(out), "--quiet")
    assert r.returncode in (0, 1), r.stderr
    before = (out / "candidates.jsonl").read_text()
    r = cli("search", "--max-candidates", "8", "--out", str(out), "--quiet")
    assert r.returncode == 2
    assert "--resume" in r.stderr and "--force" in r.stderr and "16 candidates" in r.stderr
    assert (out / "candidates.jsonl").read_text() == before
    r = cli("search", "--max-candidates", "8", "--out", str(out), "--quiet", "--force")
    assert r.returncode in (0, 1), r.stderr
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 8
    with pytest.raises(RunExistsError):
        ndvm.search("damped", max_candidates=8, out=out)


def test_output_paths_are_printed_cleanly(tmp_path):
    out = str(tmp_path / "run") + "/"
    r = cli("search", "--max-candidates", "16", "--out", out, "--quiet")
    assert "//" not in r.stdout and str(tmp_path / "run" / "candidates.jsonl") in r.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_ctrl_c_writes_summary_front_and_plots(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen(ndvm_taking_ctrl_c("search", "--task", "damped", "--budget", "5m",
                                             "--out", str(out)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    records = out / "candidates.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (records.exists() and records.stat().st_size > 0):
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "interrupted" and summary["candidates"] > 0
    assert len(records.read_text().splitlines()) == summary["candidates"]
    assert (out / "front.png").exists() and (out / "fits.png").exists()
    assert "Pareto front" in stdout and "interrupted" in stderr
    assert f"--resume continues it from {out}" in stderr  # (said what the folder is good for)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups, SIGTERM")
@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_a_signal_to_an_island_searchs_whole_process_group_stops_it_whole(sig, status, said,
                                                                          tmp_path):
    """A terminal's Ctrl-C, and a batch system's SIGTERM at the end of a job's time, reach every
    process of the group: the workers too. The search stops as after Ctrl-C, writes what it
    did, and no worker prints a traceback. Before, SIGTERM ended the search at once (no summary,
    no model), and Ctrl-C printed a KeyboardInterrupt traceback from each worker."""
    out = tmp_path / "run"
    p = subprocess.Popen(ndvm_taking_ctrl_c("search", "--task", "damped", "--islands", "2",
                                             "--workers", "2", "--budget", "5m", "--out",
                                             str(out)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tempfile.gettempdir(), start_new_session=True)
    records = out / "candidates.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (records.exists() and records.stat().st_size > 0):
        time.sleep(0.1)
    os.killpg(p.pid, sig)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == status, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "interrupted" and summary["candidates"] > 0
    assert len(records.read_text().splitlines()) == summary["candidates"]
    assert "Pareto front" in stdout and f"ndvm: {said};" in stderr
    assert f"--resume continues it from {out}" in stderr
    assert "Traceback" not in stderr


# -- messages, exit codes, options -----------------------------------------------------------------

def test_unused_bindings_are_reported():
    r = cli("run", "-", "--param", "a=2", "--data", "y=1", stdin="(* a 3)")
    assert r.returncode == 0 and "6" in r.stdout
    assert "does not use --data y" in r.stderr


@pytest.mark.parametrize("args", [
    ("run", "/nonexistent/model.scm"),
    ("disasm", "/nonexistent/model.scm"),
    ("fit", "/nonexistent/model.scm", "data.csv", "--target", "y"),
    ("compare", "/nonexistent/model.scm"),
    ("run", "example:nope.scm"),
    ("search", "--proposer", "replay", "--candidates", "/nonexistent/c.jsonl"),
    ("search", "--budget", "0"),
    ("search", "--budget", "-5s"),
    ("search", "--budget", "soon"),
    ("search", "--max-candidates", "0"),
    ("run", "-", "--max-steps", "0"),
    ("fit", "-", "x.csv"),
])
def test_every_input_error_exits_2(args, tmp_path):
    r = cli(*args, stdin="(* a x)")
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.startswith(("ndvm: ", "usage: "))


def test_an_unwritable_output_exits_2(tmp_path):
    model = tmp_path / "m.scm"
    model.write_text("(* a x)")
    csv = tmp_path / "d.csv"
    csv.write_text("x,y\n1,2\n2,4\n3,6\n")
    r = cli("fit", str(model), str(csv), "--target", "y", "--plot", "/nonexistent/dir/fit.png")
    assert r.returncode == 2 and "cannot write /nonexistent/dir/fit.png" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_missing_csv_exits_2(tmp_path):
    model = tmp_path / "m.scm"
    model.write_text("(* a x)")
    r = cli("fit", str(model), str(tmp_path / "missing.csv"), "--target", "y")
    assert r.returncode == 2 and "cannot read" in r.stderr and "missing.csv" in r.stderr


def test_budget_messages_say_what_is_wrong():
    for value, words in (("0", "positive"), ("-5s", "positive"), ("soon", "like 60")):
        r = cli("search", "--budget", value)
        assert r.returncode == 2 and "budget" in r.stderr and words in r.stderr, r.stderr
    with pytest.raises(ValueError, match="positive"):
        ndvm.search("damped", budget=0)


def test_run_limits_are_options():
    src = "(loop ((k 0)) (if (= k 100000) k (recur (+ k 1))))"
    r = cli("run", "-", "--max-steps", "1000", stdin=src)
    assert r.returncode == 2 and "LimitError" in r.stderr
    r = cli("run", "-", "--max-steps", "100000000", stdin=src)
    assert r.returncode == 0 and "100000" in r.stdout


def test_help_version_and_list():
    top = cli("--help").stdout
    assert "``" not in top and "compare" in top and "examples:" in top
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ndvm {ndvm.__version__}"
    from ndvm.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subs.choices.items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)
    search_help = cli("search", "--help").stdout
    assert "60s for damped" in search_help and "replay for kalman" in search_help
    r = cli("search", "--list")
    assert r.returncode == 0
    for name in TASKS:
        assert f"  {name} " in r.stdout
    assert "default budget 60s" in r.stdout and "default replay" in r.stdout
    assert "damped_oscillator.scm" in r.stdout and "proposals.jsonl" in r.stdout


def test_the_task_list_names_a_task_whose_extra_is_missing(monkeypatch, capsys):
    # (the series tasks need statsmodels, the [data] extra: --list crashed on the first of them
    # in an install without it, and never printed the example files)
    from ndvm import cli as cli_module
    from ndvm.cosearch import tasks

    def needs_extra():
        raise ImportError("the enso, sunspots and co2 tasks need statsmodels: pip install x")

    monkeypatch.setitem(tasks.TASKS, "enso", needs_extra)
    assert cli_module.main(["search", "--list"]) == 0
    out = capsys.readouterr().out
    assert "  enso        the enso, sunspots and co2 tasks need statsmodels" in out
    assert "  damped " in out and "damped_oscillator.scm" in out


def test_a_lost_connection_is_not_reported_as_a_file_that_cannot_be_written(monkeypatch, capsys):
    # (a socket's ConnectionResetError is an OSError without a file: the CLI said "cannot
    # write <TCP (closed) ConnectionPool.ncores ...>")
    from ndvm import cli as cli_module
    from ndvm.cosearch import loop
    from ndvm.schedule import ExecutorLost

    def reset(*args, **kw):
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(loop, "search", reset)
    monkeypatch.setattr(ndvm, "search", reset)
    assert cli_module.main(["search", "--budget", "1s"]) == 1
    err = capsys.readouterr().err
    assert "a connection was lost: ConnectionResetError" in err and "cannot write" not in err

    def lost(*args, **kw):
        raise ExecutorLost("lost the Dask cluster at tcp://h:1: it could not be asked")

    monkeypatch.setattr(ndvm, "search", lost)
    assert cli_module.main(["search", "--budget", "1s"]) == 1
    assert capsys.readouterr().err.startswith("ndvm: error: lost the Dask cluster at tcp://h:1")


def test_the_readme_sample_candidates_ship_and_find_a_good_fit():
    r = cli("search", "--task", "damped", "--proposer", "replay", "--candidates",
            "example:proposals.jsonl", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "first good fit" in r.stdout and "6 candidates" in r.stdout
    assert "example:proposals.jsonl" in (ROOT / "README.md").read_text()


def test_candidate_error_repr_names_the_kind_once():
    res = ndvm.fit_many(["(* a x)", "(* a (car x))"], data={"x": np.arange(3.0)},
                        target=np.arange(3.0), optimizer="adam", steps=5)
    text = repr(res[1])
    assert text.count("EvalError") == 1 and "\n" not in text, text


def test_disasm_explains_its_columns_and_labels_the_shared_return():
    r = cli("disasm", "-", stdin="(define (f x) (* x 2))\n(f a)")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("; columns:") and "operands" in lines[0]
    first_code = next(i for i, x in enumerate(lines) if x[:4].isdigit())
    assert lines[first_code - 1].startswith("== "), lines[:first_code + 1]


def test_reference_data_skip_message_is_actionable():
    from conftest import DATA_MISSING

    text = DATA_MISSING.format(path="/x")
    assert "optional" in text and "/x" in text and "oracle" in text


def test_result_docs_describe_their_fields():
    assert "Returns a FitResult" in ndvm.fit.__doc__
    for word in ("front", "records", "first_good", "summary()", "warnings"):
        assert word in ndvm.cosearch.SearchResult.__doc__, word
    for word in ("loss", "tol", "evaluator"):
        assert word in ndvm.fit.__doc__, word
    for word in ("batch", "workers", "grammar", "fit_options", "progress", "force"):
        assert word in ndvm.search.__doc__, word
    for word in ("value", "grad", "jacobian()", "vjp("):
        assert word in ndvm.Result.__doc__ and word in ndvm.Evaluator.evaluate.__doc__, word


# -- the console table and the pictures ------------------------------------------------------------

def _result(task, front, records=None):
    best = min(front, key=lambda r: r["heldout_error"]) if front else None
    return SearchResult(task=task, records=records or front, front=front, best=best,
                        first_good=None, elapsed=1.0, proposer="mutate", seed=0,
                        stopped="budget")


def _rec(i, size, err, var, src="(* a x)", params=None):
    return {"id": i, "proposed": src, "model": src, "status": "ok", "size": size, "heldout_error": err,
            "r2": 1 - err / var, "time": 0.1 * i, "params": params or {"a": 1.0}}


def test_a_long_front_says_what_it_leaves_out_and_keeps_the_best_and_simplest_good():
    task = get_task("damped")
    var = float(np.var(task.split("heldout")[1]))
    front = [_rec(i, 3 + i, var * (0.5 - 0.012 * i), var, src=f"(+ a {i})") for i in range(40)]
    good = next(r for r in front if r["r2"] > task.threshold)
    table = report.front_table(_result(task, front), limit=10)
    assert "front rows not shown" in table and "of 40" in table
    assert "(+ a 39)" in table and "lowest error" in table  # (the largest, lowest error)
    assert good["proposed"] in table.split("simplest good")[1].splitlines()[0]
    short = report.front_table(_result(task, front[:5]))
    assert "not shown" not in short and all(r["proposed"] in short for r in front[:5])


def _texts(fig):
    out = []
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.texts]
        leg = ax.get_legend()
        if leg:
            out += [t.get_text() for t in leg.get_texts()]
    out += [t.get_text() for t in fig.texts]
    return "\n".join(out)


def test_fits_plot_shows_the_best_and_the_simplest_good_with_readable_labels():
    pytest.importorskip("matplotlib")
    from ndvm.cli import example_path  # (ndvm.cli is not imported by ndvm itself)
    res = ndvm.search("damped", proposer="replay", candidates=[
        str(example_path("proposals.jsonl"))], budget="30s")
    fig = report.fits_figure(res)
    text = _texts(fig)
    marks = report.highlights(res)
    assert "lowest error" in text and "simplest good" in text
    for rid in marks:
        # the whole (simplified) model its parameters belong to, in the caption: the chosen one
        # as the search hands it over (res.best, refitted on every point)
        src = (res.best["model"] if "chosen" in marks[rid] else
               next(r["model"] for r in res.records if r["id"] == rid))
        assert src in " ".join(text.split()) or src in text
    # the chosen curve is res.best's prediction (it was drawn with the front member's training-
    # split fit, R^2 0.988 where the model handed over had 0.997)
    (name, x), = res.task.inputs.items()
    grid = np.linspace(x.min(), x.max(), 400)
    curves = [line.get_ydata() for line in fig.axes[0].get_lines()]
    assert "chosen" in " ".join(" ".join(m) for m in marks.values())
    assert any(np.allclose(c, res.predict({name: grid}), rtol=1e-12) for c in curves)
    legend = fig.axes[0].get_legend()
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    fig.clf()


def test_fits_plot_of_several_inputs_draws_each_rows_prediction_against_its_data(tmp_path):
    # (fits.png, promised for every search, was written for one-input tasks only)
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(1)
    m1, m2, r = rng.uniform(1, 5, 120), rng.uniform(1, 5, 120), rng.uniform(0.5, 2, 120)
    task = Task.from_arrays("grav", {"m1": m1, "m2": m2, "r": r}, 6.674 * m1 * m2 / r ** 2)
    res = ndvm.search(task, seed=0, max_candidates=300, budget=None)
    fig = report.fits_figure(res)
    text = _texts(fig)
    assert "on 120 rows of 3 inputs" in text and "predicted" in text and "residual" in text
    assert "hollow: held out" in text and "chosen" in text
    # the chosen member's points are res.best's predictions at every row, against the target
    pred = res.predict({"m1": m1, "m2": m2, "r": r})
    drawn = [c.get_offsets() for c in fig.axes[0].collections
             if len(c.get_offsets()) == len(task.train)]
    assert any(np.allclose(d, np.c_[task.target[task.train], pred[task.train]]) for d in drawn)
    fig.clf()
    assert {p.name for p in report.write_plots(res, tmp_path)} == {"front.png", "fits.png"}


def test_front_plot_of_exact_fits_and_a_constant_target_warns_of_nothing():
    # (a held-out MSE of exactly 0 on the log axis, and a constant target's variance 0 as its
    # scale: matplotlib's "Data has no positive values" and "non-positive ylim" warnings)
    pytest.importorskip("matplotlib")
    x = np.linspace(0.0, 1.0, 25)
    task = Task.from_arrays("const", {"x": x, "z": x ** 2}, np.full(25, 3.0))
    res = ndvm.search(task, seed=0, max_candidates=120, budget=None)
    assert any(r["status"] == "ok" and r["heldout_error"] == 0 for r in res.records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = report.front_figure(res)
        fig.canvas.draw()
    assert "(exact) drawn at the bottom edge" in _texts(fig)
    fig.clf()


def test_front_plot_counts_agree_and_says_when_points_are_clipped():
    pytest.importorskip("matplotlib")
    task = get_task("damped")
    var = float(np.var(task.split("heldout")[1]))
    recs = [_rec(0, 3, 0.2 * var, var), _rec(1, 5, 50 * var, var), _rec(2, 7, 0.05 * var, var)]
    recs.append({"id": 3, "proposed": "(car a)", "model": None, "status": "invalid", "size": 2,
                 "heldout_error": math.inf, "r2": None, "time": 0.4, "params": {}})
    res = _result(task, [recs[0], recs[2]], records=recs)
    text = _texts(report.front_figure(res))
    assert "4 candidates, 3 calibrated" in text and "(3 of 4)" in text
    assert "1 with MSE" in text and "drawn at the top" in text
    recs[1]["heldout_error"] = math.inf  # calibrated, but its error is not finite
    text = _texts(report.front_figure(_result(task, [recs[0], recs[2]], records=recs)))
    assert "4 candidates, 3 calibrated" in text and "(2 of 4; 1 with a non-finite" in text


def test_front_plot_marks_the_chosen_member():
    pytest.importorskip("matplotlib")
    res = ndvm.search("damped", seed=0, max_candidates=96, budget=None)
    member = res.best["front_member"]
    fig = report.front_figure(res)
    assert f"chosen by cross-validation (size {member['size']})" in _texts(fig)
    star = [c for c in fig.axes[0].collections if c.get_label().startswith("chosen")]
    assert star and np.allclose(star[0].get_offsets(), [[member["size"],
                                                         member["heldout_error"]]])
    fig.clf()


def test_likelihood_front_plot_shows_the_filtered_level_and_the_nll_per_candidate():
    pytest.importorskip("matplotlib")
    res = ndvm.search("nile", budget="20s")
    fig = report.front_figure(res)
    text = _texts(fig)
    assert len(fig.axes) == 2
    assert "negative log-likelihood" in text and "filtered level" in text and "year" in text
    level = fig.axes[1].get_lines()[1].get_ydata()
    assert level.size == 100 and 600 < level.min() and level.max() < 1300


def test_fit_plot_has_labels_model_on_a_grid_r2_parameters_and_residuals(tmp_path):
    pytest.importorskip("matplotlib")
    x = np.linspace(0.1, 6, 30)
    y = 1.5 * np.exp(-0.3 * x)
    prog = ndvm.parse("(* a (exp (* b x)))", name="decay.scm")
    res = ndvm.fit(prog, data={"x": x}, target=y, optimizer="lm", init={"a": 1, "b": -0.1})
    fig = report.fit_figure(prog, res.params, {"x": x}, y, "y", 1.0,
                            getattr(res, "stderr", None))
    text = _texts(fig)
    assert "decay.scm" in text and "R² = 1.0000" in text and "a = 1.5" in text
    main, resid = fig.axes
    assert main.get_ylabel() == "y" and resid.get_ylabel() == "residual"
    assert len(main.get_lines()[0].get_xdata()) > 10 * x.size  # a fine grid, not the data points
    csv = tmp_path / "d.csv"
    csv.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in zip(x, y)))
    model = tmp_path / "m.scm"
    model.write_text("(* a (exp (* b x)))")
    r = cli("fit", str(model), str(csv), "--target", "y", "--plot", str(tmp_path / "fit.png"))
    assert r.returncode == 0 and (tmp_path / "fit.png").read_bytes()[:4] == b"\x89PNG"


# -- compare clients on your own program -----------------------------------------------------------

def test_compare_from_python():
    x = np.linspace(0, 1, 8)
    table = ndvm.compare("(* a (exp (* b x)))", params={"a": 1.0, "b": 0.5}, data={"x": x},
                         starts=(1, 4), baselines=[], rounds=1, min_time=0.001)
    assert table.agree and len(table) == 2 * len(ndvm.clients())
    assert {r["impl"] for r in table} == set(ndvm.clients())
    row = next(r for r in table if r["starts"] == 4)
    assert row["lanes"] == 32 and row["us_per_lane"] == pytest.approx(row["us_per_call"] / 32)
    assert "µs/lane" in str(table) and "agrees" in str(table)


def test_compare_with_the_eager_baselines():
    pytest.importorskip("torch")
    table = ndvm.compare("(* a (sin (* b x)))", params={"a": 1.0, "b": 2.0},
                         data={"x": np.linspace(0, 1, 4)}, starts=(1,), rounds=1, min_time=0.001)
    kinds = {r["impl"]: r["kind"] for r in table}
    assert kinds.get("tagged") == "baseline" and kinds.get("split") == "baseline"
    assert table.agree, str(table)


def test_compare_flags_a_disagreement():
    from ndvm._compare import _diff

    assert _diff([1.0, 2.0], [1.0, 2.0])[2]
    a, r, ok = _diff([1.0, 2.1], [1.0, 2.0])
    assert not ok and a == pytest.approx(0.1) and r == pytest.approx(0.05)


def test_compare_and_bench_file_from_the_command_line(tmp_path):
    model = tmp_path / "m.scm"
    model.write_text("(* a (exp (* b x)))")
    args = [str(model), "--param", "a=1", "--param", "b=0.3", "--data", "x=0.1,0.2,0.3",
            "--starts", "1,8", "--no-baselines"]
    r = cli("compare", *args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["agree"] and {row["impl"] for row in out["rows"]} == set(ndvm.clients())
    assert {row["lanes"] for row in out["rows"]} == {3, 24}
    r = cli("bench", *args)
    assert r.returncode == 0 and "µs/lane" in r.stdout and "dmci" in r.stdout


# -- the benchmark suite against an installed package ----------------------------------------------

def _fake_layout(tmp_path):
    """A checkout (bench/ and an unbuilt ndvm/) and a site dir with an 'installed' ndvm."""
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    (checkout / "bench").mkdir(parents=True)
    (checkout / "bench" / "__init__.py").write_text((ROOT / "bench" / "__init__.py").read_text())
    (checkout / "ndvm" / "_core").mkdir(parents=True)
    (checkout / "ndvm" / "__init__.py").write_text("from ndvm._core import parse\n")
    (checkout / "ndvm" / "_core" / "__init__.py").write_text(
        (ROOT / "ndvm" / "_core" / "__init__.py").read_text())
    (site / "ndvm").mkdir(parents=True)
    (site / "ndvm" / "__init__.py").write_text("INSTALLED = True\n")
    return checkout, site


def test_bench_prefers_the_installed_package_over_an_unbuilt_checkout(tmp_path):
    checkout, site = _fake_layout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(site))
    code = "import bench, ndvm; print(ndvm.__file__)"
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=checkout, env=env, text=True,
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(site / "ndvm" / "__init__.py")


def test_an_unbuilt_source_tree_says_what_to_do(tmp_path):
    checkout, _ = _fake_layout(tmp_path)
    r = subprocess.run([sys.executable, "-S", "-c", "import ndvm"], cwd=checkout, text=True,
                       capture_output=True, env=dict(os.environ, PYTHONPATH=""))
    assert r.returncode != 0
    assert "without its compiled extension" in r.stderr and "Run from another directory" in r.stderr


def test_a_search_refuses_a_keyword_nothing_takes(tmp_path):
    # (a misspelt keyword reached Mutate.__init__, a class the user never called, or with the
    # replay proposer was ignored; one candidate file given as a string was read as its
    # characters, one file each)
    with pytest.raises(TypeError, match=r"search\(\) got an unexpected keyword argument "
                       r"'max_candidate' \(did you mean 'max_candidates'\?\); the mutate "
                       r"proposer's options are crossover, fresh"):
        ndvm.search("damped", max_candidate=100)
    with pytest.raises(TypeError, match="'foo'; the replay proposer takes no options"):
        ndvm.search("damped", proposer="replay", candidates=["x.jsonl"], foo=1)
    from ndvm.cosearch.proposers import Mutate
    with pytest.raises(TypeError, match="a Proposer object takes its options where it is made"):
        ndvm.search("damped", proposer=Mutate(), parsimony=0.1)
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"src": "(* a (cos (* b x)))"}) + "\n")
    res = ndvm.search("damped", proposer="replay", candidates=str(one), budget=None)
    assert [r["proposed"] for r in res.records] == ["(* a (cos (* b x)))"]


def test_the_cli_takes_the_round_size_a_cluster_run_was_made_with(tmp_path):
    # (a run on a Dask cluster has rounds of 512 candidates a worker thread: its candidates are
    # a local run's of that batch, which the CLI could not be given)
    r = cli("search", "--task", "damped", "--batch", "32", "--max-candidates", "96", "--quiet",
            "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    here = ndvm.search("damped", batch=32, max_candidates=96, budget=None)
    assert [json.loads(s)["proposed"] for s in lines] == [x["proposed"] for x in here.records]
    assert cli("search", "--batch", "0").returncode == 2


def test_the_small_refusals_a_new_user_meets(tmp_path):
    # --resume with --force (resume won, in silence); a resume of another task (it said "was the
    # run made by another version of ndvm or with other data?"); heldout=1.5 (one point held
    # out); an empty candidate file ("no good fit within the budget")
    from ndvm.cosearch.proposers import CandidateFileError

    run = tmp_path / "run"
    ndvm.search("damped", max_candidates=16, budget=None, out=run)
    with pytest.raises(ValueError, match="give one of them"):
        ndvm.search("damped", max_candidates=32, budget=None, out=run, resume=True, force=True)
    with pytest.raises(ValueError, match=r"cannot resume: the run in .* is a search of task "
                       r"'damped', not 'recurrence' \(give --task damped"):
        ndvm.search("recurrence", max_candidates=32, budget=None, out=run, resume=True)
    r = cli("search", "--out", str(run), "--resume", "--force", "--budget", "1s")
    assert r.returncode == 2 and "give one of them" in r.stderr
    x = np.linspace(0, 1, 20)
    for bad in (1.5, 0, 20, -0.2, True, "0.3"):
        with pytest.raises(ValueError, match="heldout is the share of the points held out"):
            ndvm.Task.from_arrays("t", {"x": x}, 2 * x, heldout=bad)
    assert ndvm.Task.from_arrays("t", {"x": x}, 2 * x, heldout=5).heldout.size == 5
    assert ndvm.Task.from_arrays("t", {"x": x}, 2 * x, heldout=0.3).heldout.size == 6
    empty = tmp_path / "none.jsonl"
    empty.write_text("\n")
    with pytest.raises(CandidateFileError, match="none.jsonl:1:1: no candidates in the file"):
        ndvm.search("damped", proposer="replay", candidates=[empty], budget=None)
    assert "--max-candidates N" in cli("search", "--help").stdout


def test_a_result_without_a_model_and_a_wrong_which_say_so(tmp_path):
    # (sympy(), latex() and tree() of a search that found no model raised "'NoneType' object is
    # not subscriptable"; which="best" a cryptic TypeError; max_candidates=2.5 a slice error)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"src": "(+ x"}) + "\n")
    res = ndvm.search("damped", proposer="replay", candidates=[bad], budget=None)
    assert res.best is None
    for call in (res.sympy, res.latex, res.tree, lambda: res.predict({"x": [1.0]})):
        with pytest.raises(ValueError, match="the search found no model"):
            call()
    res = ndvm.search("damped", max_candidates=24, budget=None)
    with pytest.raises(TypeError, match="which is None \\(the best\\), an index into the front"):
        res.sympy(which="best")
    assert res.tree(which=0) == res.tree(which=res.front[0])
    with pytest.raises(ValueError, match="max_candidates must be a positive count; got 2.5"):
        ndvm.search("damped", max_candidates=2.5)

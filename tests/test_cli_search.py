"""``ndvm fit``, ``ndvm search`` and ``ndvm bench`` run as a user would (a subprocess)."""
import json

import numpy as np
import pytest

from test_cli import ndvm


def _csv(path, rows, header="x,y"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def test_help_on_every_command():
    for cmd in ("fit", "search", "bench", "run", "disasm"):
        r = ndvm(cmd, "--help")
        assert r.returncode == 0 and "usage:" in r.stdout, cmd
    assert "--proposer" in ndvm("search", "--help").stdout
    top = ndvm("--help").stdout
    assert all(c in top for c in ("run", "fit", "search", "bench", "disasm"))


def test_fit_a_model_to_csv_data(tmp_path):
    x = np.linspace(0.1, 6, 40)
    y = 1.5 * np.exp(-0.3 * x) * np.cos(2.0 * x)
    data = _csv(tmp_path / "data.csv", zip(x, y))
    model = tmp_path / "model.scm"
    model.write_text("; damped oscillator\n(* A (* (exp (- 0 (* b x))) (cos (* omega x))))\n")
    r = ndvm("fit", str(model), data, "--target", "y", "--init", "omega=1.8", "--init", "A=1",
             "--init", "b=0.1", "--plot", str(tmp_path / "fit.png"))
    assert r.returncode == 0, r.stderr
    r2 = float(next(s for s in r.stdout.splitlines() if s.startswith("loss")).split()[-1])
    assert "omega" in r.stdout and r2 > 0.99995
    line = next(s for s in r.stdout.splitlines() if s.strip().startswith("omega"))
    assert abs(float(line.split()[1]) - 2.0) < 1e-6
    assert (tmp_path / "fit.png").exists()


def test_fit_input_errors_name_the_place(tmp_path):
    model = tmp_path / "model.scm"
    model.write_text("(* a x)\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n2,oops\n")
    r = ndvm("fit", str(model), str(bad), "--target", "y")
    assert r.returncode == 2 and "bad.csv:3:3:" in r.stderr and "oops" in r.stderr
    assert "Traceback" not in r.stderr
    good = _csv(tmp_path / "good.csv", [(1, 2), (2, 4)])
    r = ndvm("fit", str(model), good, "--target", "z")
    assert r.returncode == 2 and "good.csv:1:1: no column 'z'" in r.stderr
    model.write_text("(* a\n   (car x))\n")
    r = ndvm("fit", str(model), good, "--target", "y")
    assert r.returncode == 2 and "model.scm:2:4" in r.stderr and "EvalError" in r.stderr
    assert "Traceback" not in r.stderr


def test_search_damped_writes_record_summary_and_plots(tmp_path):
    out = tmp_path / "run"
    r = ndvm("search", "--task", "damped", "--budget", "30s", "--stop", "--out", str(out),
             "--seed", "0")
    assert r.returncode == 0, r.stderr
    assert "first good fit" in r.stdout and "Pareto front" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    # the model selection's choice is explained under the table, as summary.json records it
    assert "chosen by the one-standard-error rule" in r.stdout
    assert summary["selection"] and summary["selection"] in r.stdout
    assert "candidates" in r.stderr and "front" in r.stderr  # the progress line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["first_good"]["r2"] > 0.9 and summary["stopped"] == "success"
    lines = (out / "candidates.jsonl").read_text().splitlines()
    assert len(lines) == summary["candidates"]
    for name in ("front.png", "fits.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    r = ndvm("search", "--task", "damped", "--max-candidates", str(len(lines) + 16), "--out",
             str(out), "--resume", "--quiet")  # (the run's total: 16 more)
    assert r.returncode == 0, r.stderr
    assert len((out / "candidates.jsonl").read_text().splitlines()) == len(lines) + 16


def test_search_replay_and_its_errors(tmp_path):
    f = tmp_path / "cands.jsonl"
    f.write_text(json.dumps({"src": "(* a (* (exp (* b x)) (cos (* c x))))"}) + "\n")
    r = ndvm("search", "--task", "damped", "--proposer", "replay", "--candidates", str(f),
             "--quiet")
    assert r.returncode == 0, r.stderr
    assert "(* a (* (exp (* b x)) (cos (* c x))))" in r.stdout
    f.write_text('{"src": "(* a x)"}\n{"src": ]\n')
    r = ndvm("search", "--task", "damped", "--proposer", "replay", "--candidates", str(f))
    assert r.returncode == 2 and "cands.jsonl:2:9: invalid JSON" in r.stderr
    assert "Traceback" not in r.stderr
    r = ndvm("search", "--task", "damped", "--proposer", "replay", "--quiet")  # the task's seeds
    assert r.returncode == 1 and "no good fit" in r.stdout and "3 candidates" in r.stdout
    r = ndvm("search", "--task", "nope")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = ndvm("search", "--budget", "soon")
    assert r.returncode == 2 and "budget" in r.stderr


def test_search_nile_prints_the_variances():
    r = ndvm("search", "--task", "nile", "--proposer", "replay", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "q=1469" in r.stdout and "r=1509" in r.stdout


def test_bench_runs():
    r = ndvm("bench", "--repeat", "20")
    assert r.returncode == 0, r.stderr
    assert "kalman2d_T80" in r.stdout and "ndvm.fit" in r.stdout


def test_bench_json_without_a_file():
    # (--json was ignored without a program file: a table came out)
    r = ndvm("bench", "--repeat", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = out["evaluate_grad_us"]
    assert {row["program"] for row in rows} >= {"damped_oscillator", "kalman2d_T80"}
    assert all(row["lanes_1"] > 0 and row["lanes_256"] > 0 for row in rows)
    assert out["fit"]["ms"] > 0


@pytest.mark.parametrize("args, said", [
    (["--param", "a=1"], "--param is for timing your own program"),
    (["--data", "x=1,2", "--no-baselines"], "--data, --no-baselines are for timing"),
    (["--starts", "1,8"], "--starts is for timing"),
])
def test_bench_refuses_a_programs_options_without_its_file(args, said):
    # (they were ignored: the built-in programs were timed as if they were not there)
    r = ndvm("bench", "--repeat", "4", *args)
    assert r.returncode == 2 and said in r.stderr and "FILE.scm" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("starts, said", [("1,0", "must be positive"), (",", "no start count"),
                                          ("1,x", "whole numbers above 0")])
def test_start_counts_are_checked_where_they_are_read(starts, said):
    r = ndvm("compare", "prog.scm", "--starts", starts)
    assert r.returncode == 2 and "argument --starts" in r.stderr and said in r.stderr


def test_search_on_a_dask_scheduler(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        r = ndvm("search", "--task", "damped", "--max-candidates", "32", "--quiet",
                 "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "run"))
    assert r.returncode in (0, 1), r.stderr  # 1: no good fit within 32 candidates
    assert f"calibrating on the Dask cluster at {cluster.scheduler_address}" in r.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["candidates"] == 32 and summary["calibrated"] > 0
    r = ndvm("search", "--task", "damped", "--max-candidates", "4", "--scheduler",
             "tcp://127.0.0.1:9", "--quiet")
    assert r.returncode == 2 and "cannot connect to the Dask scheduler at tcp://127.0.0.1:9" \
        in r.stderr and "Traceback" not in r.stderr
    r = ndvm("search", "--task", "damped", "--scheduler", "tcp://127.0.0.1:9", "--workers", "2")
    assert r.returncode == 2 and "give one or the other" in r.stderr


def test_a_column_named_like_a_procedure_is_refused_at_load(tmp_path):
    """A data column named ``length`` (a procedure of the language) used to shadow nothing: the
    programs read it as the procedure and every candidate failed; now the load says so."""
    # (and, since 2026-12-06, the header's column of the name, and a rename that reads:
    # 'x_mass_1__kg_' was offered)
    for header, said in [("length,mass,y", "d.csv:1:1: the input name 'length' cannot be a "
                          "variable|rename it, e.g. to x_length"),
                         ("F,mass 1 [kg],y", "d.csv:1:3: the input name 'mass 1 [kg]' cannot be "
                          "a variable|rename it, e.g. to mass_1_kg")]:
        data = _csv(tmp_path / "d.csv", [(i, i + 1, 2 * i + 1) for i in range(8)], header=header)
        r = ndvm("search", "--csv", data, "--max-candidates", "4", "--quiet")
        assert r.returncode == 2
        assert all(part in r.stderr for part in said.split("|")), r.stderr


@pytest.mark.parametrize("name", ["length", "pi", "lambda", "1.5", "a b", "(x)"])
def test_task_names_that_cannot_be_program_variables_are_refused(name):
    from ndvm.cosearch.task import Task
    x = np.linspace(0, 1, 10)
    with pytest.raises(ValueError, match="cannot be a variable of a program"):
        Task.from_arrays("t", {name: x}, x)
    with pytest.raises(ValueError, match="parameter name"):
        Task.from_arrays("t", {"x": x}, x, params=(name,))
    Task.from_arrays("t", {"x_1": x, "mass": x}, x)  # ordinary names are fine


def test_a_nan_or_inf_in_the_search_csv_is_an_error_at_its_line_and_column(tmp_path):
    """A NaN target used to run a whole search whose every error was NaN; now the load stops
    at the cell (blank lines counted)."""
    data = tmp_path / "d.csv"
    data.write_text("x,y\n1,2\n\n2,nan\n3,4\n")
    r = ndvm("search", "--csv", str(data), "--max-candidates", "4", "--quiet")
    assert r.returncode == 2
    assert "d.csv:4:3: column 'y': nan is not a finite number" in r.stderr
    data.write_text("x,y\n#units m,s\n1,2\n-inf,3\n")
    r = ndvm("search", "--csv", str(data), "--max-candidates", "4", "--quiet")
    assert "d.csv:4:1: column 'x': -inf is not a finite number" in r.stderr


def test_a_task_with_non_finite_data_is_refused():
    from ndvm.cosearch.task import Task
    x = np.linspace(0, 1, 10)
    y = x.copy()
    y[3] = np.nan
    with pytest.raises(ValueError, match=r"the target has a non-finite value \(nan\) at index 3"):
        Task.from_arrays("t", {"x": x}, y)
    x2 = x.copy()
    x2[[1, 7]] = np.inf
    with pytest.raises(ValueError, match=r"input 'x' has a non-finite value \(inf\) at index 1 "
                                         r"\(2 in all\)"):
        Task.from_arrays("t", {"x": x2}, x)


@pytest.mark.parametrize("quiet", [False, True])
def test_an_island_search_shows_its_warnings_once(quiet, tmp_path):
    # a search of one population shows each warning as it happens; an island search's were
    # only in summary.json unless --quiet. (Here a time budget far too short for 48 islands.)
    r = ndvm("search", "--task", "damped", "--budget", "1s", "--islands", "48", "--workers",
             "1", "--migration-every", "4096", "--out", str(tmp_path / "run"),
             *(["--quiet"] if quiet else []))
    assert r.returncode == 0, r.stderr
    shown = [line for line in r.stderr.splitlines() if line.startswith("ndvm: warning: only")]
    assert len(shown) == 1 and "of the 48 islands ran" in shown[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert any("of the 48 islands ran" in w for w in summary["warnings"])


def test_an_island_search_takes_its_migrants_and_resumes_from_the_command_line(tmp_path):
    # (--migrants, which resume needs given again, was the Python API's alone; an interrupted
    # island search could not be resumed)
    out = str(tmp_path / "run")
    common = ["search", "--task", "damped", "--islands", "2", "--workers", "1",
              "--migration-every", "32", "--migrants", "2", "--quiet", "--out", out]
    r = ndvm(*common, "--max-candidates", "64")
    assert r.returncode in (0, 1), r.stderr
    settings = json.loads((tmp_path / "run" / "summary.json").read_text())["settings"]
    assert settings["migrants"] == 2 and settings["islands"] == 2
    r = ndvm(*common, "--max-candidates", "128", "--resume")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    ids = [json.loads(x)["id"] for x in (tmp_path / "run" / "candidates.jsonl").read_text()
           .splitlines()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) >= 128
    r = ndvm(*[a if a != "2" or i != common.index("--migrants") + 1 else "3"
               for i, a in enumerate(common)], "--max-candidates", "192", "--resume")
    assert r.returncode == 2 and "was searched with migrants=2, and this session has " \
        "migrants=3" in r.stderr and "Traceback" not in r.stderr
    r = ndvm("search", "--task", "damped", "--migrants", "-1")
    assert r.returncode == 2 and "--migrants: must be a whole number >= 0, got -1" in r.stderr


@pytest.mark.parametrize("args, said", [
    (["fit", "m.scm", "d.csv", "--target", "y", "--param", "a=1"],
     "ndvm fit: error: unrecognized arguments: --param a=1 (did you mean --params?)"),
    (["search", "--task", "damped", "--max-cand", "8"],
     "ndvm search: error: unrecognized arguments: --max-cand 8 (did you mean --max-candidates?)"),
])
def test_an_option_is_never_taken_from_its_prefix(args, said):
    # (argparse took --param for fit's --params, a list of names, and --max-cand for
    # --max-candidates: a prefix of another flag, or a typo, chose an option silently)
    r = ndvm(*args)
    assert r.returncode == 2 and said in r.stderr and r.stdout == ""


def test_a_csv_search_calibrates_as_the_estimator_does(tmp_path):
    # (a CSV task had the paper's 50 Adam steps from starts near 0: a target near 1000 was
    # never reached, every one of 2,000 candidates recorded failed with "a pole between the
    # data points"; and a right exponential structure was left at a = 1.8, b = -0.64)
    from ndvm.cli import csv_task
    from ndvm.cosearch.task import DATA_FIT
    from ndvm.estimator import SymbolicRegressor

    x = np.linspace(0.0, 1.0, 60)
    data = _csv(tmp_path / "big.csv", zip(x, 1000 + 50 * x))
    r = ndvm("search", "--csv", data, "--max-candidates", "64", "--quiet", "--seed", "0")
    assert r.returncode == 0, r.stderr
    assert "first good fit: " in r.stdout and "model: (+ 1000.0 (* 50.0 x))" in r.stdout
    assert csv_task(data).fit == DATA_FIT
    est = SymbolicRegressor()
    assert (est.optimizer, est.steps, est.starts, est.start_scales) == (
        DATA_FIT["optimizer"], DATA_FIT["steps"], DATA_FIT["starts"], DATA_FIT["start_scales"])


def test_candidates_name_the_replay_proposer_and_no_other(tmp_path):
    # (--candidates without --proposer replay was ignored, a missing file too: the task's
    # default mutate search ran, exit 0)
    import ndvm as api

    f = tmp_path / "c.jsonl"
    f.write_text('{"src": "(* a x)"}\n')
    r = ndvm("search", "--candidates", str(f), "--quiet")
    assert r.returncode in (0, 1) and "1 candidate (" in r.stdout, r.stderr
    r = ndvm("search", "--candidates", str(tmp_path / "none.jsonl"), "--quiet")
    assert r.returncode == 2 and "none.jsonl" in r.stderr and "No such file" in r.stderr
    r = ndvm("search", "--proposer", "mutate", "--candidates", str(f), "--quiet")
    assert r.returncode == 2 and "read by the replay proposer, not 'mutate'" in r.stderr
    assert [x["proposed"] for x in api.search("damped", candidates=str(f)).records] == ["(* a x)"]
    with pytest.raises(ValueError, match="read by the replay proposer, not 'mutate'"):
        api.search("damped", proposer="mutate", candidates=[f], max_candidates=4)


def test_two_csv_columns_of_one_name_are_refused(tmp_path):
    # (they were read as one column twice as long: "input 'q1' has 40 points but the target
    # has 20")
    data = _csv(tmp_path / "dup.csv", [(1, 2, 3), (2, 3, 5)], header="q1,q1,y")
    for args in (["search", "--csv", data, "--quiet"],
                 ["fit", str(tmp_path / "m.scm"), data, "--target", "y"]):
        (tmp_path / "m.scm").write_text("(* a q1)")
        r = ndvm(*args)
        assert r.returncode == 2 and "two columns are named 'q1' (columns 1 and 2)" in r.stderr


def test_the_plot_written_is_the_one_named(tmp_path):
    # (--plot fit wrote fit.png and said "wrote fit"; --plot DIR wrote DIR.png)
    pytest.importorskip("matplotlib")
    (tmp_path / "m.scm").write_text("(* a x)")
    data = _csv(tmp_path / "d.csv", [(1, 2), (2, 4.1), (3, 5.9)])
    r = ndvm("fit", str(tmp_path / "m.scm"), data, "--target", "y", "--plot",
             str(tmp_path / "fit"))
    assert r.returncode == 0 and f"wrote {tmp_path / 'fit.png'}" in r.stdout
    assert (tmp_path / "fit.png").is_file()
    r = ndvm("fit", str(tmp_path / "m.scm"), data, "--target", "y", "--plot", str(tmp_path))
    assert r.returncode == 2 and "is a folder: give a file name" in r.stderr


def test_a_search_of_a_column_of_extreme_size_warns(tmp_path):
    # (a target near 1e12 searched as given came back a polynomial with R2 0.998, where divided
    # by 1e12 the law is found; SymbolicRegressor divides itself, ndvm search said nothing)
    import ndvm as api
    from ndvm.cosearch.task import Task, decade

    assert [decade(v) for v in ([1e-3, 5.0], [9999.0], [2e12], [-3e-7], [0.0])] == [
        1.0, 1.0, 1e12, 1e-7, 1.0]
    x = np.linspace(1.0, 3.0, 40)
    data = _csv(tmp_path / "big.csv", zip(x, 2e12 * x))
    r = ndvm("search", "--csv", data, "--max-candidates", "32", "--quiet")
    assert "the target reaches 6e+12" in r.stderr and "divide it by 1e+12" in r.stderr
    task = Task.from_arrays("t", {"x": x * 1e-9}, 2.0 * x)
    for islands in (1, 2):
        res = api.search(task, max_candidates=32, islands=islands, workers=1)
        said = [w for w in res.warnings if "reaches" in w]
        assert len(said) == 1 and said[0].startswith("input 'x' reaches 3e-09") and (
            "divide it by 1e-09" in said[0])
    assert not api.search("damped", max_candidates=16).warnings


def test_no_parameter_takes_the_target_columns_name(tmp_path):
    # (inputs a, b, c and a target d gave parameters d, p0, p1, p2: "d = 2.5 set" then read as
    # the target)
    from ndvm.cli import csv_task

    rng = np.random.default_rng(0)
    a, b, c = rng.uniform(1, 2, (3, 30))
    task = csv_task(_csv(tmp_path / "abcd.csv", zip(a, b, c, a * b / c), "a,b,c,d"), "d")
    assert task.params == ("p0", "p1", "p2", "p3") and task.target_name == "d"
    assert csv_task(_csv(tmp_path / "xy.csv", zip(a, a)), "y").params == ("a", "b", "c", "d")


def test_a_search_of_few_points_says_they_are_few(tmp_path):
    # (5 rows of a 3-input law chose a size-22 program, "R2 on all 5 points: 0.999999", and
    # said nothing)
    import ndvm as api
    from ndvm.cosearch.task import FEW_POINTS

    rng = np.random.default_rng(0)
    x1, x2, x3 = rng.uniform(1, 2, (3, 5))
    data = _csv(tmp_path / "few.csv", zip(x1, x2, x3, 2.5 * x1 * x2 / x3), "x1,x2,x3,y")
    r = ndvm("search", "--csv", data, "--max-candidates", "32", "--quiet")
    assert "ndvm: warning: only 5 data points (3 training, 2 held out)" in r.stderr, r.stderr
    x = np.linspace(1.0, 2.0, FEW_POINTS)
    for n, warned in ((FEW_POINTS - 1, True), (FEW_POINTS, False)):
        res = api.search(api.Task.from_arrays("t", {"x": x[:n]}, 2.0 * x[:n]), max_candidates=16)
        assert any(w.startswith(f"only {n} data points") for w in res.warnings) == warned

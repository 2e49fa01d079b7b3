"""The ``ndvm`` command line, run as a user would (a subprocess)."""
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ndvm_taking_ctrl_c


def ndvm(*args, stdin=None):
    # run outside the checkout so that the installed package is imported, not the source tree
    return subprocess.run([sys.executable, "-m", "ndvm", *args], input=stdin, text=True,
                          capture_output=True, timeout=120, cwd=tempfile.gettempdir())


def test_run_example_with_gradients():
    r = ndvm("run", "example:damped_oscillator.scm", "--param", "A=1", "--param", "b=0.3",
             "--param", "omega=2", "--data", "t=0,0.5,1,1.5", "--grad")
    assert r.returncode == 0, r.stderr
    assert "-0.631247" in r.stdout           # the value at t = 1.5
    assert "d/dA" in r.stdout and "gradient of the sum" in r.stdout


def test_run_from_stdin_with_bytecode_client_if_available():
    import ndvm as lib

    client = "bytecode" if "bytecode" in lib.clients() else "dmci"
    r = ndvm("run", "-", "--param", "a=2,3", "--client", client, "--grad", stdin="(* a a)")
    assert r.returncode == 0, r.stderr
    assert _table(r.stdout, "value") == [4.0, 9.0]
    assert _table(r.stdout, "d/da") == [4.0, 6.0]


def _table(out, column):
    """The numbers in one column of the table `ndvm run` prints."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if column in line.split())
    k = lines[head].split().index(column)
    rows = []
    for line in lines[head + 1:]:
        cells = line.split()
        try:
            rows.append(float(cells[k]))
        except (IndexError, ValueError):
            break
    return rows


@pytest.mark.parametrize("src, needle", [
    ("(+ 1", "ReadError"),
    ("(car 1.0)", "EvalError"),
    ("(* a x)", "UnboundError"),
    ("(if)", "FormError"),
])
def test_errors_print_one_clear_line_and_exit_2(src, needle):
    r = ndvm("run", "-", stdin=src)
    assert r.returncode == 2
    assert needle in r.stderr and "<stdin>:1:" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_file_and_bad_arguments():
    r = ndvm("run", "/nonexistent/model.scm")
    assert r.returncode != 0 and "cannot read" in r.stderr
    r = ndvm("run", "-", "--param", "a", stdin="a")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr


def test_help():
    r = ndvm("--help")
    assert r.returncode == 0 and "run" in r.stdout
    r = ndvm("run", "--help")
    assert r.returncode == 0 and "--param" in r.stdout


def test_disasm():
    r = ndvm("disasm", "-", stdin="(define (f x) (* x 2))\n(f a)")
    assert r.returncode == 0, r.stderr
    assert "CALL" in r.stdout or "TAIL_CALL" in r.stdout
    assert "PRIM" in r.stdout


def test_fit_prints_standard_errors_and_why_it_stopped(tmp_path):
    import numpy as np

    x = np.linspace(0.1, 6, 40)
    y = 2.0 * np.exp(-0.3 * x) + 0.01 * np.sin(7 * x)
    (tmp_path / "d.csv").write_text("x,y\n" + "\n".join(f"{a:.17g},{b:.17g}" for a, b in zip(x, y)))
    (tmp_path / "m.scm").write_text("(* A (exp (- 0 (* b x))))")
    r = ndvm("fit", str(tmp_path / "m.scm"), str(tmp_path / "d.csv"), "--target", "y")
    assert r.returncode == 0, r.stderr
    assert "std. error" in r.stdout
    assert "\nconverged: " in r.stdout and "met" in r.stdout
    # a budget too small to finish: the fit says so instead of claiming convergence
    r = ndvm("fit", str(tmp_path / "m.scm"), str(tmp_path / "d.csv"), "--target", "y",
             "--steps", "2")
    assert r.returncode == 0, r.stderr
    assert "NOT converged: the evaluation budget (steps=2) ran out" in r.stdout


def _write_fit_files(tmp_path, src, header="x,y"):
    import numpy as np

    x = np.linspace(0.1, 6, 40)
    y = 2.0 * np.exp(-0.3 * x) + 0.01 * np.sin(7 * x)
    (tmp_path / "d.csv").write_text(f"{header}\n" + "\n".join(f"{a:.17g},{b:.17g}"
                                                              for a, b in zip(x, y)))
    (tmp_path / "m.scm").write_text(src)
    return str(tmp_path / "m.scm"), str(tmp_path / "d.csv")


def test_fit_warns_of_a_numbered_name_without_its_column(tmp_path):
    (tmp_path / "d.csv").write_text("x1,x2,y\n" + "".join(
        f"{a},{a * a},{3 * a + a * a}\n" for a in (0.1, 0.5, 1.0, 1.5, 2.0, 2.5)))
    (tmp_path / "m.scm").write_text("(+ (* a x1) x2 x3)")
    r = ndvm("fit", str(tmp_path / "m.scm"), str(tmp_path / "d.csv"), "--target", "y")
    assert r.returncode == 0, r.stderr
    assert ("ndvm: warning: 'x3' matches no CSV column and is fitted as a parameter (the "
            "program reads x1, x2; give --params to fit it on purpose)") in r.stderr
    assert "UserWarning" not in r.stderr


def test_fit_of_a_program_that_reads_the_target_column_says_so(tmp_path):
    # (it said the program "reads none of the columns (m1, m2, r, junk)" and to "name a column
    # as the program names its input", though F is a column: the target)
    m, d = _write_fit_files(tmp_path, "(* a F)", header="m1,F")
    r = ndvm("fit", m, d, "--target", "F")
    assert r.returncode == 2 and "reads none" not in r.stderr
    assert f"{m}: the program reads 'F', the target column" in r.stderr and "m1" in r.stderr


def test_fit_reports_a_name_without_a_column_as_a_parameter_and_warns_on_a_near_miss(tmp_path):
    """`time` is not a column (the CSV has `tme`): it is fitted as a parameter, the output lists
    it, and a warning names the column it probably meant. A program that reads no column at
    all (`time` its only input) is an error, naming the column too: its fit would be of
    constants alone."""
    m, d = _write_fit_files(tmp_path, "(* A (exp (- 0 (* rate time))))", header="tme,y")
    r = ndvm("fit", m, d, "--target", "y")
    assert r.returncode == 2, r.stderr
    assert (f"{d}:1:1: the program reads none of the columns (tme); its free names are A, "
            f"rate, time: every one would be fitted as a constant; 'time' (column 'tme'?)"
            ) in r.stderr
    (tmp_path / "two.csv").write_text("x,tme,y\n" + "".join(
        f"{a},{a},{2 * a}\n" for a in (0.1, 0.5, 1.0, 1.5, 2.0, 2.5)))
    m2 = tmp_path / "two.scm"
    m2.write_text("(+ (* A x) (* rate time))")
    r = ndvm("fit", str(m2), str(tmp_path / "two.csv"), "--target", "y")
    assert r.returncode == 0, r.stderr
    assert "fitted A, rate, time to y" in r.stdout or "fitted A, rate, time" in r.stdout
    assert any(line.split()[:1] == ["time"] for line in r.stdout.splitlines())
    assert ("ndvm: warning: 'time' matches no CSV column and is fitted as a parameter "
            "(did you mean column 'tme'?)") in r.stderr
    # no warning when every free name is a column or clearly a parameter
    m, d = _write_fit_files(tmp_path, "(* A (exp (- 0 (* rate x))))")
    r = ndvm("fit", m, d, "--target", "y")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_fit_rejects_nan_in_the_csv_naming_the_column_and_row(tmp_path):
    m, d = _write_fit_files(tmp_path, "(* A (exp (- 0 (* b x))))")
    lines = open(d).read().splitlines()
    lines[5] = "nan," + lines[5].split(",")[1]
    open(d, "w").write("\n".join(lines))
    r = ndvm("fit", m, d, "--target", "y")
    assert r.returncode != 0
    assert (f"{d}:6:1: column 'x': nan is not a finite number (remove or fill the row, or "
            f"drop such rows: --nan-policy omit)") in r.stderr, r.stderr
    assert r.returncode == 2


def test_fit_nan_policy_omit_leaves_the_bad_rows_out(tmp_path):
    m, d = _write_fit_files(tmp_path, "(* A (exp (- 0 (* b x))))")
    lines = open(d).read().splitlines()
    n = len(lines) - 1
    lines[5] = "nan," + lines[5].split(",")[1]
    open(d, "w").write("\n".join(lines))
    r = ndvm("fit", m, d, "--target", "y")
    assert r.returncode != 0 and "--nan-policy omit" in r.stderr, r.stderr
    r = ndvm("fit", m, d, "--target", "y", "--nan-policy", "omit")
    assert r.returncode == 0, r.stderr
    assert f"over {n - 1} rows" in r.stdout and "1 row(s) with NaN or inf omitted" in r.stderr
    r2 = float(r.stdout.split("R2")[1].split()[0])
    assert math.isfinite(r2) and r2 > 0.99


@pytest.mark.parametrize("cell", ["", "NA"])
def test_an_empty_or_na_cell_is_a_missing_value(cell, tmp_path):
    # (pandas writes NaN as an empty cell, R as NA: --nan-policy omit refused the file with
    # "expected a number, got ''")
    m, d = _write_fit_files(tmp_path, "(* A (exp (- 0 (* b x))))")
    lines = (tmp_path / "d.csv").read_text().splitlines()
    n = len(lines) - 1
    lines[5] = cell + "," + lines[5].split(",")[1]
    (tmp_path / "d.csv").write_text("\n".join(lines))
    r = ndvm("fit", m, d, "--target", "y")
    assert r.returncode == 2 and (f"{d}:6:1: column 'x': a missing value ({cell!r}) (remove or "
                                  f"fill the row, or drop such rows: --nan-policy omit)"
                                  ) in r.stderr, r.stderr
    r = ndvm("fit", m, d, "--target", "y", "--nan-policy", "omit")
    assert r.returncode == 0, r.stderr
    assert f"over {n - 1} rows" in r.stdout and "1 row(s) with NaN or inf omitted" in r.stderr
    r = ndvm("search", "--csv", d, "--target", "y", "--max-candidates", "8")
    assert r.returncode == 2 and "column 'x': a missing value" in r.stderr, r.stderr


def test_a_fit_that_overflows_fails_without_numpy_noise(tmp_path):
    # (it printed numpy's "RuntimeWarning: overflow encountered in square" from cli.py and
    # exited 0 with a loss of inf)
    m, d = _write_fit_files(tmp_path, "(* A (exp (* b x x x)))")
    r = ndvm("fit", m, d, "--target", "y", "--init", "b=500", "--init", "A=1")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "loss (MSE) inf" in r.stdout and "NOT converged" in r.stdout
    assert "RuntimeWarning" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_output_piped_into_a_reader_that_leaves_ends_quietly():
    # (`ndvm run ... | head -2`: the closed pipe was reported as "a connection was lost")
    points = ",".join(str(i / 100) for i in range(20000))
    p = subprocess.Popen([sys.executable, "-m", "ndvm", "run", "example:damped_oscillator.scm",
                          "--param", "A=1", "--param", "b=0.3", "--param", "omega=2",
                          "--data", f"t={points}"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    assert p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=120) == 141
    assert p.stderr.read() == ""


def test_files_that_are_not_utf8_are_named_and_a_byte_order_mark_is_dropped(tmp_path):
    # (a binary file gave "'utf-8' codec can't decode byte 0xff in position 0", no file named;
    # a spreadsheet's byte-order mark became part of the first name: "unbound variable '\ufeff'")
    (tmp_path / "bin.scm").write_bytes(b"\xff\xfe(+ x 1)")
    (tmp_path / "bom.scm").write_bytes(b"\xef\xbb\xbf(* a x)")
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfx,y\n1,2\n2,4\n3,6\n")
    (tmp_path / "bin.csv").write_bytes(b"x,y\n1,\xff\n")
    (tmp_path / "bin.jsonl").write_bytes(b'{"src": "\xff"}\n')
    for args, where in ((["run", "bin.scm"], "bin.scm"),
                        (["fit", "bom.scm", "bin.csv", "--target", "y"], "bin.csv"),
                        (["search", "--proposer", "replay", "--candidates", "bin.jsonl"],
                         "bin.jsonl")):
        r = ndvm(*[str(tmp_path / a) if a.endswith((".scm", ".csv", ".jsonl")) else a
                   for a in args])
        assert r.returncode == 2 and f"{where}: not UTF-8 text: byte 0xff at offset" in r.stderr
        assert "Traceback" not in r.stderr
    r = ndvm("fit", str(tmp_path / "bom.scm"), str(tmp_path / "bom.csv"), "--target", "y")
    assert r.returncode == 0 and "fitted a to y over 3 rows (data: x)" in r.stdout, r.stderr


def test_an_empty_value_is_refused_and_compare_says_its_param_is_one_value():
    # (--param A=1,,2 was two starts, the empty value dropped in silence; compare's help said
    # "one value, or one per start", and it takes one)
    r = ndvm("run", "example:damped_oscillator.scm", "--param", "A=1,,2", "--param", "b=1",
             "--param", "omega=1", "--data", "t=1")
    assert r.returncode == 2
    assert "values of 'A' must be numbers separated by commas: '1,,2'" in r.stderr
    assert "one value (the starts of each" in ndvm("compare", "--help").stdout


def test_a_candidate_nested_too_deeply_for_the_search_says_so(tmp_path):
    # (it was recorded invalid with "maximum recursion depth exceeded while getting the str of
    # an object", though the reader takes 10,000 levels)
    import json

    import ndvm as api

    deep = "(* a " + "(+ 1 " * 900 + "x" + ")" * 900 + ")"
    f = tmp_path / "deep.jsonl"
    f.write_text(json.dumps({"src": deep}) + "\n")
    res = api.search("damped", proposer="replay", candidates=[f], budget=None)
    assert [r["status"] for r in res.records] == ["invalid"]
    assert "nested too deeply for the search" in res.records[0]["error"]


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "ndvm: interrupted"),
                                               (signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_a_long_evaluation_stops_on_ctrl_c_and_sigterm(tmp_path, sig, status, said):
    # (with a raised step limit an endless loop ran on through Ctrl-C and a batch system's
    # SIGTERM: Python's handlers wait for the native call to return)
    prog = tmp_path / "loop.scm"
    prog.write_text("(loop ((k 0)) (recur (+ k 1)))")
    p = subprocess.Popen(ndvm_taking_ctrl_c("run", str(prog), "--max-steps",
                                            "9000000000000000000"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    # (sent once the command runs: its SIGTERM handler installed, then a moment into the loop;
    # a fixed 1.5 s could land during the import on a loaded machine, before any handler)
    _wait_until_catching(p.pid, signal.SIGTERM)
    time.sleep(0.5)
    p.send_signal(sig)
    try:
        assert p.wait(timeout=30) == status
    finally:
        p.kill()
    assert said in p.stderr.read()


def _wait_until_catching(pid, signum, timeout=60.0):
    """Return once process ``pid`` has a handler of its own for ``signum`` (Linux's
    /proc/PID/status SigCgt; elsewhere after 1.5 s); fails the test after ``timeout`` s."""
    status = f"/proc/{pid}/status"
    if not os.path.exists(status):
        time.sleep(1.5)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(status) as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if caught >> (signum - 1) & 1:
            return
        time.sleep(0.02)
    pytest.fail(f"the process installed no handler of signal {signum} in {timeout:g} s")


def _stops_on_ctrl_c(setup, long_call, then):
    """Run ``setup``, then ``long_call`` with a SIGINT sent 0.5 s into it, then ``then`` (each a
    line of Python, in a fresh interpreter): assert KeyboardInterrupt came out of the long call
    and ``then`` printed 3.0 after it. (Unarmed, each long call here runs for minutes to hours:
    the timeout fails it; no timing is asserted.)"""
    code = ("import os, signal, threading, numpy as np, ndvm\n"
            # (a child of a background job inherits SIGINT ignored: restored, as in a terminal)
            f"signal.signal(signal.SIGINT, signal.default_int_handler)\n{setup}\n"
            "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
            f"try:\n    {long_call}\nexcept KeyboardInterrupt:\n    print('INTERRUPTED')\n"
            f"print({then})\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=tempfile.gettempdir(), check=False)
    assert r.returncode == 0 and r.stdout.split() == ["INTERRUPTED", "3.0"], r.stderr


@pytest.mark.parametrize("client, lanes, max_steps", [
    ("bytecode", 1, 9_000_000_000_000_000_000),  # (its steps were counted with no check)
    ("dmci", 1 << 16, None),  # (wide data at the default limit: hours of steps, unarmed)
    ("bytecode", 1 << 16, None),
])
def test_every_long_evaluation_stops_on_ctrl_c(client, lanes, max_steps):
    limit = "" if max_steps is None else f", max_steps={max_steps}"
    _stops_on_ctrl_c(
        f"ev = ndvm.Evaluator(client={client!r}{limit}); x = np.linspace(0.0, 1.0, {lanes})",
        "ev.evaluate(ndvm.parse('(loop ((k 0) (s x)) (if (= k 4000000000) s "
        "(recur (+ k 1) (* s 1.0000001))))'), data={'x': x})",
        "float(ev.evaluate(ndvm.parse('(+ 1 2)')).value[0, 0])")


def test_a_long_fit_stops_on_ctrl_c():
    # (ndvm.fit's native calibrations ran on through Ctrl-C to their end: minutes on a model
    # of many parameters or a long loop; here 100,000 Adam steps of ~0.2 s)
    _stops_on_ctrl_c(
        "x = np.linspace(0.0, 1.0, 2000)",
        "ndvm.fit('(loop ((k 0) (s 0.0)) (if (= k 3000) (* a (/ s 3000.0)) (recur (+ k 1) "
        "(+ s (* b x)))))', data={'x': x}, target=np.sin(10 * x), optimizer='adam', starts=8, "
        "steps=100000, tol=0)",
        "ndvm.fit('(* a x)', data={'x': x}, target=3 * x).params['a']")


def test_a_long_evaluation_raises_keyboardinterrupt_and_the_machine_runs_again():
    _stops_on_ctrl_c("ev = ndvm.Evaluator(max_steps=9_000_000_000_000_000_000)",
                     "ev.evaluate(ndvm.parse('(loop ((k 0)) (recur (+ k 1)))'))",
                     "float(ev.evaluate(ndvm.parse('(+ 1 2)')).value[0, 0])")


def test_compare_counts_identical_nans_as_agreeing(tmp_path):
    # (every row said "agrees NO" with max |delta| 0, exit 1, for (log a) at a = -1)
    (tmp_path / "lg.scm").write_text("(log a)")
    r = ndvm("compare", str(tmp_path / "lg.scm"), "--param", "a=-1", "--no-baselines")
    assert r.returncode == 0, r.stdout + r.stderr
    assert " NO" not in r.stdout and "yes" in r.stdout and "Warning" not in r.stderr


def test_a_library_warning_on_the_command_line_is_one_ndvm_line(monkeypatch, capsys):
    # (the Dask no-worker notice printed ".../ndvm/parallel.py:553: UserWarning: ndvm: ..." and
    # its source line)
    import warnings as w

    from ndvm import cli as c

    def warns(args):
        w.warn("ndvm: the Dask cluster has had no worker for 30 s", stacklevel=2)
        return 0

    monkeypatch.setattr(c, "cmd_run", warns)
    with w.catch_warnings():
        w.simplefilter("always")
        assert c.main(["run", "-"]) == 0
    err = capsys.readouterr().err
    assert err == "ndvm: warning: the Dask cluster has had no worker for 30 s\n"


def test_a_name_given_twice_to_a_repeated_flag_is_refused(tmp_path):
    # (--data x=1 --data x=2 ran with x = 2 without a word)
    (tmp_path / "ax.scm").write_text("(* a x)")
    r = ndvm("run", str(tmp_path / "ax.scm"), "--param", "a=1", "--data", "x=1", "--data", "x=2")
    assert r.returncode == 2 and "--data x= is given twice" in r.stderr


def test_an_index_that_depends_on_a_parameter_says_so_on_one_lane():
    # ("index must be the same in every lane" on one lane, S = N = 1)
    import ndvm as nd

    with pytest.raises(nd.EvalError, match="index must not depend on data or parameters"):
        nd.Evaluator().evaluate("(ref (vec 10 20 30) a)", params={"a": 1.0})
    with pytest.raises(nd.EvalError, match=r"size 100000000 out of range \(0 to 65535\)"):
        nd.Evaluator().evaluate("(zeros 100000000)")

"""Large data (10^4 to 10^6 rows): what grew with the rows where it need not, each found by running
the user paths on big data; every test is quick (no timing is asserted)."""
import os

import numpy as np
import pytest

import ndvm
from ndvm.cosearch import report
from ndvm.cosearch.loop import SearchResult
from ndvm.cosearch.task import Task

N = 60_000  # (rows: several times report.PLOT_ROWS)


def _points(fig):
    """Every scatter's number of points in ``fig``."""
    return [len(c.get_offsets()) for ax in fig.axes for c in ax.collections]


def _result(inputs, target):
    task = Task.from_arrays("big", inputs, target)
    model = "(* a " + " ".join(inputs) + ")" if len(inputs) > 1 else "(* a x)"
    rec = {"id": 0, "proposed": model, "model": model, "status": "ok", "size": 1 + len(inputs),
           "heldout_error": 0.01, "r2": 0.99, "time": 0.1, "params": {"a": 2.0}}
    return SearchResult(task=task, records=[rec], front=[rec], best=rec, first_good=None,
                        elapsed=1.0, proposer="mutate", seed=0, stopped="budget")


@pytest.mark.parametrize("k", [1, 3])
def test_fits_plot_of_many_rows_draws_a_seeded_sample_and_says_so(k):
    # (fits.png drew every row for each highlighted model: 15 to 20 s to save on 10^6 rows)
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    names = ["x"] if k == 1 else [f"x{i}" for i in range(k)]
    inputs = {n: rng.uniform(1, 2, N) for n in names}
    res = _result(inputs, 2.0 * np.prod(list(inputs.values()), axis=0) + rng.normal(0, .01, N))
    fig = report.fits_figure(res)
    drawn = _points(fig)
    assert drawn and max(drawn) <= report.PLOT_ROWS
    assert sum(drawn) >= report.PLOT_ROWS  # (every drawn row, train and held out)
    assert f"{report.PLOT_ROWS:,} of the {N:,} rows drawn" in fig.axes[0].get_title()
    fig.clf()


def test_fit_plot_of_many_rows_draws_a_seeded_sample_and_says_so():
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, N)
    y = 2.0 * x + rng.normal(0, .01, N)
    for data in ({"x": x}, {"x": x, "z": x[::-1].copy()}):
        fig = report.fit_figure(ndvm.parse("(+ (* a x) (* 0 z))" if "z" in data else
                                           "(* a x)"), {"a": 2.0}, data, y, "y", 0.99)
        drawn = _points(fig)
        assert drawn and max(drawn) == report.PLOT_ROWS
        assert f"{report.PLOT_ROWS:,} of the {N:,} rows drawn" in fig.axes[0].get_title()
        fig.clf()


def test_a_plot_of_few_rows_draws_them_all_and_says_nothing_of_a_sample():
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    inputs = {"x0": rng.uniform(1, 2, 500), "x1": rng.uniform(1, 2, 500)}
    res = _result(inputs, 2.0 * inputs["x0"] * inputs["x1"])
    fig = report.fits_figure(res)
    assert max(_points(fig)) == 500 and "drawn" not in fig.axes[0].get_title()
    fig.clf()


def test_a_csv_file_is_read_without_a_python_object_for_every_cell(tmp_path):
    # (read_table held every row as a list of strings and every number as a float object:
    # 607 MB to read a 47 MB file of 10^6 rows of 4 columns, 12 times the file's size)
    import tracemalloc

    from ndvm.cli import read_table
    rng = np.random.default_rng(0)
    table = rng.uniform(-1, 1, (10_000, 4))
    path = tmp_path / "big.csv"
    np.savetxt(path, table, delimiter=",", header="a,b,c,y", comments="", fmt="%.17g")
    tracemalloc.start()
    try:
        cols, units = read_table(path, finite=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert units is None and list(cols) == ["a", "b", "c", "y"]
    assert all(np.array_equal(cols[k], table[:, j]) for j, k in enumerate(cols))
    assert peak < 4 * path.stat().st_size  # (the text, once, and the columns)


_TABLES = {  # (name -> the file's text; each read the same by numpy's reader and row by row)
    "digits": "a,b,y\n" + "".join(f"{x!r},{-x * 1e-300!r},{x * 7.3e12!r}\n" for x in
                                   np.random.default_rng(1).normal(size=300).tolist()),
    "crlf, blank lines, spaces, quotes": 'a,b\r\n1.5, 2\r\n\r\n"3",4e-3\r\n-0.0,+7\r\n',
    "units row, byte-order mark": "\ufeffx,y\n#units m,s\n1,2\n3,4\n",
    "non-finite": "x,y\ninf,1\nnan,-inf\n1e400,2\n",
    "one column": "y\n1\n2\n",
}
_ROW_BY_ROW = {  # (files numpy's reader leaves to the row-by-row reader)
    "missing cell": "x,y\n1,\n2,3\n", "NA": "x,y\nNA,1\n2,3\n", "ragged": "x,y\n1,2,3\n",
    "lone CR": "x,y\r1,2\r3,4\r", "quoted name": '"x\nz",y\n1,2\n', "underscore": "x,y\n1_0,2\n",
    "blank cells": "x,y\n1,2\n,\n3,4\n", "no rows": "x,y\n", "spaced quotes": 'x,y\n "3" ,4\n',
}


@pytest.mark.parametrize("name", [*_TABLES, *_ROW_BY_ROW])
@pytest.mark.parametrize("finite", [False, True, {"y"}])
def test_numpy_s_reader_and_the_row_by_row_reader_read_a_csv_file_the_same(
        tmp_path, monkeypatch, name, finite):
    from ndvm import cli
    path = tmp_path / "t.csv"
    path.write_bytes({**_TABLES, **_ROW_BY_ROW}[name].encode())

    def read():
        try:
            return cli.read_table(path, finite=finite)
        except cli.InputError as e:
            return str(e)

    plain, fast = cli._plain_numbers, []
    monkeypatch.setattr(cli, "_plain_numbers", lambda *a: fast.append(plain(*a)) or fast[-1])
    got = read()
    monkeypatch.setattr(cli, "_plain_numbers", lambda *a: None)
    want = read()
    if isinstance(want, str):
        assert got == want
    else:
        assert list(got[0]) == list(want[0]) and got[1] == want[1]
        assert all(np.array_equal(got[0][k], want[0][k], equal_nan=True) for k in want[0])
    # (numpy's reader read every plain file where it may: nothing that must be finite is not)
    plain_file = name in _TABLES and (name != "non-finite" or finite is False)
    assert (fast[-1] is not None) == plain_file


_LM_MEMORY = """
import resource, sys
import numpy as np
import ndvm
n, starts = 50_000, 16
rng = np.random.default_rng(0)
x = rng.uniform(1, 3, n)
y = 2.0 * x + 1.0 + rng.normal(0, 0.1, n)
ndvm.fit("(+ (* a x) b c d)", data={"x": x[:100]}, target=y[:100])  # (every buffer but the big)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ndvm.fit("(+ (* a x) b c d)", data={"x": x}, target=y, starts=starts, steps=3)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
print(grown / (2 * starts * n * 4))  # (bytes per lane, point and parameter: "both", 2 lanes)
"""


# (a peak RSS under AddressSanitizer counts its quarantine and shadow)
_OWN_ALLOCATOR = pytest.mark.skipif(bool(os.environ.get("NDVM_SANITIZED")),
                                    reason="a peak RSS under the sanitizers counts their memory")


def _printed_by_child(code):
    """The last number ``code`` prints, run by a new Python outside the checkout (whose ndvm/
    would shadow the installed one): a peak RSS of its own."""
    import subprocess
    import sys
    import tempfile
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=tempfile.gettempdir(), check=False)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


@_OWN_ALLOCATOR
def test_lm_holds_one_copy_of_the_jacobian_for_its_qr_not_one_per_start():
    # (each LM lane kept its own N x P copy of the Jacobian that refactor's QR overwrites and
    # nothing read again: ndvm.fit of 8 starts on 10^6 rows of 4 parameters took 2.1 GB, 1.65
    # GB with one copy for all lanes; the lanes' Jacobians, the evaluation's and their trial
    # remain, about 3 doubles a lane, point and parameter, where there were 4)
    per = _printed_by_child(_LM_MEMORY)
    assert per < 3.5 * 8, per


_LM_GROUPS = """
import resource
import numpy as np
import ndvm
n, starts = 1_000_000, 8
rng = np.random.default_rng(0)
x = rng.uniform(0, 10, n)
y = 2.5 * np.exp(-0.3 * x) * np.cos(1.7 * x) + rng.normal(0, 0.01, n)
prog = "(* A (exp (* (- 0 b) x)) (cos (* w x)))"
init = {"A": 2.0, "b": 0.2, "w": 1.6}
ndvm.fit(prog, data={"x": x[:100]}, target=y[:100], init=init)  # (every buffer but the big)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ndvm.fit(prog, data={"x": x}, target=y, starts=starts, init=init, steps=5)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024 / 2**20)
"""


@_OWN_ALLOCATOR
def test_lm_on_many_points_runs_its_starts_in_groups_of_bounded_memory():
    # (all 8 starts of a fit on 10^6 points ran as one batch: it grew 1,055 MB; in groups of at
    # most kLanesAtOnce lanes, fit/fit.hpp, 200 MB)
    grown_mb = _printed_by_child(_LM_GROUPS)
    assert grown_mb < 500, grown_mb


def test_lm_in_groups_of_starts_ends_each_start_as_one_batch_would():
    # 8 starts on 200,000 points run in groups (fit/fit.hpp's kLanesAtOnce: 2 lanes a start,
    # 5 starts a group); each start alone runs in one batch. Every start ends the same, bit for
    # bit; the history repeats a stopped start's loss until the last start stops, and n_evals
    # counts the steps of the longest, as one batch of all of them does
    rng = np.random.default_rng(3)
    n, starts = 200_000, 8
    x = rng.uniform(0, 10, n)
    y = 2.5 * np.exp(-0.3 * x) * np.cos(1.7 * x) + rng.normal(0, 0.05, n)
    prog = ndvm.parse("(* A (exp (* (- 0 b) x)) (cos (* w x)))")
    init = {"A": rng.uniform(1, 4, starts), "b": rng.uniform(0.05, 0.6, starts),
            "w": rng.uniform(1.5, 1.9, starts)}
    whole = ndvm.fit(prog, data={"x": x}, target=y, starts=starts, init=init, steps=30)
    alone = [ndvm.fit(prog, data={"x": x}, target=y, starts=1, steps=30,
                      init={k: v[s:s + 1] for k, v in init.items()}) for s in range(starts)]
    assert whole.n_evals == max(r.n_evals for r in alone)
    for s, r in enumerate(alone):
        for k in init:
            assert whole.all_params[k][s] == r.all_params[k][0]
        assert whole.all_losses[s] == r.all_losses[0]
        assert whole.status[s] == r.status[0]
        np.testing.assert_array_equal(whole.all_covariance[s], r.all_covariance[0])
        mine = r.history[:, 0]
        used = int(np.flatnonzero(~np.isnan(mine))[-1]) + 1
        np.testing.assert_array_equal(whole.history[:used, s], mine[:used])
        longest = max(int(np.flatnonzero(~np.isnan(q.history[:, 0]))[-1]) + 1 for q in alone)
        assert np.all(whole.history[used:longest, s] == mine[used - 1])
        assert np.all(np.isnan(whole.history[longest:, s]))

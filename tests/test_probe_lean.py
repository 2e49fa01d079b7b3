"""A candidate's probe (``validate_each`` -> ``Machine._probe``) with its fixed costs cut: the
native stack limit read once a run, the free names' bindings resized only when their count
changes, and outputs that fit checked without the guarded call. Each probe still gives what the
general evaluation gives (the same exception, message and position), on both clients and over
repeated rounds, and a machine's runs of other free names, failed runs and limits between them
change nothing."""
import numpy as np
import pytest
from conftest import run_with_stack

import ndvm
from ndvm.cosearch import score
from ndvm.cosearch.score import Scorer
from ndvm.cosearch.task import named_in
from ndvm.cosearch.tasks import get_task

# per source what makes it raise (or not): its probe must say what evaluating it alone says
RAISING = [
    "(* a x)",                             # valid
    "((lambda (y) y) x a)",                # wrong arity
    "(x a)",                               # a number applied
    "(1 2)",                               # a literal applied
    "(if (> x 3.0) (car x) (* a x))",      # raises only on the rows past 3.0 (a mixed branch)
    "(if (> x 100.0) (car x) (* a x))",    # would raise, on no row: valid
    "(* a z)",                             # a free name the task does not allow
    "(* a (car (list)))",                  # the empty list's car
    "(* b (exp (* c x)))",                 # valid, other free names
    "(let loop ((i 0)) (loop i))",         # the probe's step limit
    "(+ 1 #t)",                            # a type error
    "(lambda (y) y)",                      # the result is not a number
    "(* a (cos (* b x)))",                 # valid
    "(define)",                            # does not expand
    "(+ a",                                # does not read
]


def _alone(scorer, src):
    """(type, message, line, col, form) of what evaluating ``src`` alone on a fresh evaluator of
    the scorer's client raises at the probe's inputs, or (source, free names, params)."""
    task = scorer.task
    ev = ndvm.Evaluator(client=scorer.client, max_steps=score._PROBE_STEPS)
    try:
        prog = ndvm.parse(src, name=score.CANDIDATE)
        bad = [n for n in prog.free_names if n not in task.allowed_names]
        if bad:
            raise ValueError(f"free name(s) not allowed by the task: {', '.join(bad)}")
        params = tuple(n for n in prog.free_names if n in task.params)
        ev.evaluate(prog, {n: (task.init or {}).get(n, 0.5) for n in params},
                    named_in(scorer.probe_points, prog), named_in(task.consts, prog))
    except Exception as e:  # noqa: BLE001
        return _said(e)
    return prog.source, prog.free_names, params


def _said(e):
    return (type(e), str(e), getattr(e, "line", None), getattr(e, "col", None),
            getattr(e, "form", None))


def _got(g):
    if isinstance(g, Exception):
        return _said(g)
    prog, params = g
    return prog.source, prog.free_names, params


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_the_probe_raises_what_the_general_evaluation_raises_on_both_clients_round_after_round(
        client):
    """Each source's outcome (exception type, message, line, column and form, or the program)
    is what evaluating it alone raises, in three orders, round after round on one scorer (its
    machine reused), with its probe entries cleared between rounds and not."""
    scorer = Scorer(get_task("damped"), client=client, workers=1)
    alone = {src: _alone(scorer, src) for src in RAISING}
    kinds = {a[0] if isinstance(a[0], type) else str for a in alone.values()}
    assert {str, ValueError, ndvm.errors.LimitError, ndvm.errors.EvalError} <= kinds
    for k, order in enumerate((RAISING, RAISING[::-1], RAISING[4:] + RAISING[:4]) * 2):
        if k == 3:
            scorer._probes.clear()
        got = scorer.validate_round(order)
        assert [_got(g) for g in got] == [alone[s] for s in order]


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_inputs_that_do_not_bind_raise_what_evaluating_them_raises(client):
    """A program whose probe inputs do not bind (its entry holds ``evaluate``'s arguments, data
    of two lengths here) raises what ``evaluate`` raises on them; a program of other names
    between two of them is probed on the machine, round after round, on both clients."""
    from ndvm._core._core import validate_each

    data = {"x": np.linspace(0.0, 1.0, 5), "y": np.ones(4)}
    sources = ["(+ x y)", "(* a x)", "(- y x)", "(car x)", "(* a x)"]
    ev = ndvm.Evaluator(client=client)

    def entry(prog):
        params = {"a": 0.5} if "a" in prog.free_names else {}
        try:
            return None, tuple(params), ev.bind(prog, params, named_in(data, prog))
        except ValueError:
            return None, tuple(params), (params, named_in(data, prog), {})

    alone = []
    for src in sources:
        try:
            prog = ndvm.parse(src, name="<candidate>")
            ev.evaluate(prog, {"a": 0.5} if "a" in prog.free_names else None,
                        named_in(data, prog))
            alone.append((src, prog.free_names, ("a",) if "a" in prog.free_names else ()))
        except Exception as e:  # noqa: BLE001
            alone.append(_said(e))
    assert alone[0][0] is ValueError and alone[2][0] is ValueError
    for _ in range(2):
        got = validate_each(sources, "<candidate>", {}, entry, ev._machine(), ev.client,
                            ev.evaluate)
        assert [_got(g) for g in got] == alone


def _grads(ev, src, params, data):
    prog = ndvm.parse(src)
    r = ev.evaluate(prog, params, data, grad=True)
    return r.value.copy(), {k: v.copy() for k, v in r.grad.items()}


def test_a_machines_runs_of_other_free_names_and_failed_runs_leave_nothing_behind():
    """Runs of more, fewer and other-ordered free names (parameters where data were, and the
    reverse), and runs that fail, one after another on one machine, each give what a fresh
    evaluator gives: values and gradients bit for bit (a parameter's payload is found again for
    each binding, none kept from the run before)."""
    x = np.linspace(0.1, 2.0, 7)
    runs = [
        ("(* a (exp (* b x)))", {"a": [0.5, 1.5], "b": 0.25}, {"x": x}),
        ("(+ a x)", {"a": 2.0}, {"x": x}),
        ("(car x)", {}, {"x": x}),  # fails in evaluation
        ("(* x (+ a b c))", {"c": 1.0, "a": [1.0, 2.0, 3.0], "b": 0.5}, {"x": x}),
        ("(* a b)", {"a": 3.0, "b": [1.0, 2.0]}, {}),
        ("(+ x y a)", {"a": 0.5}, {"x": x, "y": x[::-1].copy()}),
        ("(* b a)", {"b": 2.0, "a": 0.25}, {}),
    ]
    for client in ("dmci", "bytecode"):
        shared = ndvm.Evaluator(client=client)
        for _ in range(2):
            for src, params, data in runs:
                try:
                    fresh = _grads(ndvm.Evaluator(client=client), src, params, data)
                except ndvm.errors.SchemeError as e:
                    with pytest.raises(type(e)) as got:
                        _grads(shared, src, params, data)
                    assert _said(got.value) == _said(e)
                    continue
                value, grads = _grads(shared, src, params, data)
                assert np.array_equal(value, fresh[0]) and grads.keys() == fresh[1].keys()
                for k in grads:
                    assert np.array_equal(grads[k], fresh[1][k])


def test_outputs_that_fit_pass_and_those_that_do_not_raise_the_core_error():
    """The outputs' check: at exactly the memory limit they fit (what fails then is the run's
    own memory, not the outputs'); a byte less, the core's error for them with the program's
    position; and more lanes than a lane index counts is the lane error, whatever the limit."""
    prog = ndvm.parse("(* a x)", name="<candidate>")
    x = np.linspace(0.0, 1.0, 16)
    need = 4 * 16 * 8  # (S x N float64 values)
    for client in ("dmci", "bytecode"):
        roomy = ndvm.Evaluator(client=client, max_memory=need)
        try:
            roomy.evaluate(prog, {"a": np.ones(4)}, {"x": x})
        except ndvm.errors.LimitError as e:
            assert "values and gradients" not in str(e)
        tight = ndvm.Evaluator(client=client, max_memory=need - 1)
        with pytest.raises(ndvm.errors.LimitError, match="values and gradients of 4 x 16 lanes"
                           ) as got:
            tight.evaluate(prog, {"a": np.ones(4)}, {"x": x})
        assert (got.value.line, got.value.col, got.value.file) == (1, 1, "<candidate>")
        wide = ndvm.Evaluator(client=client)
        with pytest.raises(ndvm.errors.LimitError, match="too many lanes: 65537 starts x 65536"):
            wide.evaluate(prog, {"a": np.ones(65537)}, {"x": np.ones(65536)})


def test_the_native_stack_limit_is_the_running_threads_on_a_machine_shared_across_threads():
    """A machine run on a thread of a small stack after the main thread ran it (and the main
    thread again after) meets the native stack limit of the thread running it (read once a run,
    not kept from the run before): deep recursion stops with the native-stack LimitError at a
    shallower depth on the small stack than on the main thread's, and at the main thread's own
    depth again after."""
    src = "(let f ((n 0)) (if (> n 1000000) n (+ 1 (f (+ n 1)))))"
    ev = ndvm.Evaluator(max_depth=10_000_000)
    m = ev._machine()

    def deep():
        prog = ndvm.parse(src)
        with pytest.raises(ndvm.errors.LimitError, match="native stack at depth") as got:
            ev.run(prog, ev.bind(prog))
        return int(str(got.value).split("at depth ")[1].split()[0])

    said = {}

    def small():
        ev._local.machine = m  # (this thread runs the main thread's machine)
        said["small"] = deep()

    first = deep()
    run_with_stack(small, 1 << 20)
    assert 0 < said["small"] < first
    assert deep() == first

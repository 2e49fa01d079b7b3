"""No input crashes or hangs ndvm: pathological programs, limits, threads with small stacks.

Every crash found here once became a regression test (see the notes on each test).
"""

import numpy as np
import pytest
from conftest import CLIENTS, run_with_stack

import ndvm


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("src, outcome", [
    ("(+ 1 " * 9000 + "1" + ")" * 9000, 9001.0),
    ("(let ((x 1)) " * 3000 + "x" + ")" * 3000, 1.0),
    ("(if #t " * 5000 + "1" + " 2)" * 5000, 1.0),
    ("(length (iota 100000))", 100000.0),
    ("(vsum (zeros 60000))", 0.0),
    ("(car '" + "(" * 3000 + ")" * 3000 + ")", "EvalError"),
    ("(" * 100000 + ")" * 100000, "ReadError"),
    ("(vsum (zeros 65535 65535))", "LimitError"),
    ("(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 1000000)", "LimitError"),
    ("(define (f n) (+ 1 (f n))) (f 1)", "LimitError"),
    ("(loop ((i 0)) (recur (+ i 1)))", "LimitError"),
    ("(define (f) (f)) (f)", "LimitError"),
    ("1e999", float("inf")),
    ("(- 1e308 -1e308)", float("inf")),
])
def test_pathological_programs(src, outcome, client):
    ev = ndvm.Evaluator(client=client, max_steps=5_000_000)
    if isinstance(outcome, str):
        with pytest.raises(ndvm.SchemeError) as info:
            ev.evaluate(src)
        assert info.value.kind == outcome
        assert info.value.line is not None
    else:
        assert ev.evaluate(src).item() == outcome
    assert ev.evaluate("(+ 1 2)").item() == 3.0


@pytest.mark.parametrize("client", CLIENTS)
def test_small_thread_stacks_raise_instead_of_crashing(client):
    """Regression: deep nesting in a thread with a 512 KiB stack used to segfault the reader,
    the expander and the evaluator; each now checks the native stack it actually has."""
    ev = ndvm.Evaluator(client=client)
    results = []

    def work():
        for src in ["(+ 1 " * 9000 + "1" + ")" * 9000,
                    "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 9000)",
                    "(car '" + "(" * 9000 + ")" * 9000 + ")"]:
            try:
                results.append(ev.evaluate(src).item())
            except ndvm.SchemeError as e:
                # a stack-bound refusal must say so; any other error is wrong here
                results.append(e.kind if "native stack" in e.message else (e.kind, e.message))

    run_with_stack(work, 512 * 1024)
    # each program either gives its exact answer or refuses for lack of native stack
    assert len(results) == 3
    assert results[0] in (9001.0, "ReadError", "LimitError"), results[0]
    assert results[1] in (9000.0, "LimitError"), results[1]
    car_of_nested = ("EvalError", "the program's result must be a number, got a pair")
    assert results[2] in (car_of_nested, "ReadError", "LimitError"), results[2]


@pytest.mark.parametrize("client", CLIENTS)
def test_limits_are_settable_and_named(client):
    ev = ndvm.Evaluator(client=client, max_steps=1000, max_depth=50, max_memory=1 << 20)
    with pytest.raises(ndvm.LimitError, match="max_steps"):
        ev.evaluate("(loop ((i 0)) (if (= i 5000) i (recur (+ i 1))))")
    with pytest.raises(ndvm.LimitError, match="max_depth"):
        ev.evaluate("(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 100)")
    with pytest.raises(ndvm.LimitError, match="max_memory"):
        ev.evaluate("(trace (ones 600 600))")
    big = ndvm.Evaluator(client=client)
    assert big.evaluate("(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 100)").item() == 100


@pytest.mark.parametrize("client", CLIENTS)
def test_memory_limit_stops_a_growing_program(client):
    ev = ndvm.Evaluator(client=client, max_memory=64 << 20, max_steps=100_000_000)
    with pytest.raises(ndvm.LimitError, match="memory"):
        ev.evaluate("(loop ((i 0) (acc '())) (recur (+ i 1) (cons x acc)))",
                    data={"x": np.arange(256.0)})


@pytest.mark.parametrize("client", CLIENTS)
def test_nan_and_inf_inputs(client):
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate("(if (> x 0) (* a x) a)", params={"a": [1.0, np.nan]},
                      data={"x": [np.inf, -np.inf, np.nan]}, grad=True)
    assert res.value.shape == (2, 3)
    assert res.value[0, 0] == np.inf and res.value[0, 1] == 1.0


def test_read_of_deep_data_never_crashes():
    assert len(ndvm.read("(" * 5000 + ")" * 5000)) == 1
    results = []

    def work():
        try:
            ndvm.read("(" * 9000 + ")" * 9000)
            results.append("ok")
        except ndvm.ReadError:
            results.append("ReadError")

    run_with_stack(work, 512 * 1024)
    assert results in (["ok"], ["ReadError"])


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_none_and_a_fresh_machines_tape_are_errors_not_segfaults(client):
    # (each of these was a segfault, exit 139)
    e = ndvm.Evaluator(client=client)
    with pytest.raises(ValueError, match="no kept tape to sweep"):
        e.sweep(e.tape(), np.ones((1, 1)))
    with pytest.raises(TypeError, match="'inputs' has incorrect type"):
        e.run(ndvm.parse("1"), None)
    with pytest.raises(TypeError, match="'prog' has incorrect type"):
        e.bind(None)
    with pytest.raises(TypeError, match="'prog' has incorrect type"):
        ndvm._core.bind(None)
    p = ndvm.parse("(* a x)")
    inputs = e.bind(p, {"a": [1.0, 2.0]}, {"x": [1.0, 2.0, 3.0]})
    e.run(p, inputs)  # (no tape kept: a sweep after it says so, not InternalError)
    with pytest.raises(ValueError, match="no kept tape"):
        e.sweep(e.tape(), np.ones((2, 3)))
    e.run(p, inputs, grad=True, reduce=None)
    token = e.tape()
    assert np.array_equal(e.sweep(token, np.ones((2, 3))), [[6.0, 6.0]])
    ndvm.fit(p, data={"x": [1.0, 2.0, 3.0]}, target=[1.0, 2.0, 3.0], evaluator=e)
    assert e.sweep(token, np.ones((2, 3))) is None  # (the machine ran something else since)
    with pytest.raises(ValueError, match="no kept tape"):  # (the fit overwrote the tape)
        e.sweep(e.tape(), np.ones((2, 3)))


def test_inputs_bound_for_one_program_are_refused_by_another_and_a_seed_keeps_the_loss():
    e = ndvm.Evaluator()
    a, b = ndvm.parse("(- a x)"), ndvm.parse("(- x a)")
    inputs = e.bind(a, {"a": 10.0}, {"x": [1.0, 2.0]})
    # (bound by position: (- x a) ran on them gave [9, 8], (- a x)'s values, gradient misnamed)
    with pytest.raises(ValueError, match="bound for a program whose free names are a, x, and "
                                         "this one's are x, a"):
        e.run(b, inputs)
    assert np.array_equal(e.run(ndvm.parse("(- a (* 1 x))"), inputs)[0], [[9.0, 8.0]])
    p = ndvm.parse("(* a x)")
    inputs = e.bind(p, {"a": [1.0, 2.0]}, {"x": [1.0, 2.0, 3.0]})
    want = e.run(p, inputs, target=np.ones(3))[2]
    assert np.allclose(want, [5 / 3, 35 / 3])
    # (with a seed of the caller's too the loss was [0, 0])
    for grad in (False, True):
        got = e.run(p, inputs, grad=grad, seed=np.ones((2, 3)), target=np.ones(3))
        assert np.array_equal(got[2], want)


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_map_over_several_lists_uses_every_list(client):
    # (the prelude's map read only the first two lists: (map + l1 l2 l3) summed to 33, not 333)
    ev = ndvm.Evaluator(client=client)
    lists = "(list 1 2) (list 10 20) (list 100 200)"
    assert ev.evaluate(f"(fold-left + 0 (map + {lists}))").value[0, 0] == 333.0
    by_lambda = f"(fold-left + 0 (map (lambda (a b c) (+ a b c)) {lists}))"
    assert ev.evaluate(by_lambda).value[0, 0] == 333
    assert ev.evaluate(f"(fold-left + 0 (map + {lists} (list 1000 2000)))").value[0, 0] == 3333
    assert ev.evaluate("(fold-left + 0 (map * (list 1 2 3) (list 4 5)))").value[0, 0] == 14
    with pytest.raises(ndvm.EvalError, match="map-takes-at-most-four-lists"):
        ev.evaluate(f"(fold-left + 0 (map + {lists} (list 1 2) (list 1 2)))")


def test_a_fit_spec_bound_for_other_free_names_is_refused():
    # (FitBatch.add_spec took a spec bound for another program's free names: the program read
    # its values by position, past them when it had more)
    from ndvm._core import FitBatch
    from ndvm.fit import FitOptions, FitPlan

    plan = FitPlan(FitOptions.of(), {"x": np.linspace(0, 1, 5)}, np.ones(5))
    prog = ndvm.parse("(* a x)")
    plan.stage(FitBatch(), prog)
    spec = plan._shared[prog.free_names].spec
    other = ndvm.parse("(+ (* a x) (* b z) c)")
    with pytest.raises(ValueError, match="bound for a program whose free names are a, x, and "
                                         "this one's are a, x, b, z, c"):
        FitBatch().add_spec(other, other.compiled(ndvm.Evaluator().client), spec)
    FitBatch().add_spec(ndvm.parse("(+ (* a x) 1)"), prog.compiled(ndvm.Evaluator().client), spec)

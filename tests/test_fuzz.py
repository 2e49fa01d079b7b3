"""Fuzzing both clients: every outcome is a value or an ndvm.SchemeError with a line, never a
crash, hang or other exception; the clients agree; the process stays usable.

The default run is derandomized (fixed examples, a few seconds). The long mode explores new
examples; it is one command (see docs/robustness.md):

    NDVM_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py -m fuzz -q

or, for hours with crash and hang detection in a child process, ``python tests/fuzz_long.py``.
Each crash found here became a regression test at the bottom of this file.
"""
import faulthandler
import os
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ndvm
from fuzzgen import Case, Gen, check_case, still_usable

LONG = int(os.environ.get("NDVM_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(max_examples=LONG or 150, deadline=None, derandomize=not LONG,
                    suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture(autouse=True)
def _watchdog():
    """A hang turns into a traceback and a failed run instead of a stalled one."""
    faulthandler.dump_traceback_later(1800, exit=True, file=sys.__stderr__)
    yield
    faulthandler.cancel_dump_traceback_later()


def _run(r, make):
    gen = Gen(r, big=bool(LONG))
    case = make(gen)
    check_case(case)


@pytest.mark.fuzz
@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_valid_programs(r):
    """Random well-typed programs with random parameters (NaN, inf, divergent lanes)."""
    def make(g):
        params, data, consts = g.inputs()
        return Case("valid", g.valid(), params, data, consts, grad=g.chance(0.8),
                    dtype="float32" if g.chance(0.15) else "float64")
    _run(r, make)


@pytest.mark.fuzz
@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_ill_typed_programs(r):
    """Wrong types and arities, unbound names, malformed forms, huge literals, bad shapes."""
    def make(g):
        params, data, consts = g.inputs()
        return Case("bad", g.ill_typed(), params, data, consts, grad=g.chance(0.8),
                    limits={"max_steps": 200_000})
    _run(r, make)


@pytest.mark.fuzz
@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_mutated_programs(r):
    """Token-level mutations of valid programs, as a mutating search proposes them."""
    def make(g):
        params, data, consts = g.inputs()
        return Case("mutated", g.mutated(), params, data, consts, limits={"max_steps": 200_000})
    _run(r, make)


@pytest.mark.fuzz
@settings(SETTINGS, max_examples=LONG or 40)
@given(st.randoms(use_true_random=False))
def test_fuzz_pathological_programs(r):
    """Deep nesting, long loops, runaway recursion, huge vectors, extreme limits."""
    def make(g):
        params, data, consts = g.inputs()
        case = g.case()
        return Case("stress", g.stress(), params, data, consts, grad=case.grad,
                    dtype=case.dtype, compat=case.compat, limits=case.limits)
    _run(r, make)


@pytest.mark.fuzz
@settings(SETTINGS, max_examples=LONG or 150)
@given(st.randoms(use_true_random=False))
def test_fuzz_mixed_cases(r):
    """Any category, any lane count, dtype, compat mode and limits."""
    _run(r, lambda g: g.case())


def test_process_is_still_usable():
    still_usable()


# ---- regressions: each crash or wrong answer the fuzzer found --------------------------------

@pytest.mark.parametrize("client", ndvm.clients())
def test_transpose_of_a_wide_matrix_raises(client):
    """Found by the fuzzer: transpose cast the column count to the 16-bit row count, so a 1 x
    100000 matrix became 34464 x 1 (a silent wrong answer; 65536 columns became 0 rows)."""
    ev = ndvm.Evaluator(client=client)
    assert ev.evaluate("(vlen (transpose (zeros 1 65535)))").item() == 65535.0
    with pytest.raises(ndvm.EvalError, match="too wide to transpose") as info:
        ev.evaluate("(vlen (transpose (zeros 1 100000)))")
    assert (info.value.line, info.value.col) == (1, 7)


def test_text_that_is_not_unicode_is_a_read_error():
    """Found by the fuzzer: a lone surrogate in program text raised UnicodeEncodeError."""
    for fn in (ndvm.parse, ndvm.read, ndvm.Evaluator().evaluate):
        with pytest.raises(ndvm.ReadError, match="not valid Unicode") as info:
            fn("(+ 1\n  \udfff)")
        assert (info.value.line, info.value.col) == (2, 3)


@pytest.mark.parametrize("client", ndvm.clients())
@pytest.mark.parametrize("S, N, match", [(70000, 70000, "too many lanes"),
                                          (40000, 40000, "memory limit")])
def test_more_lanes_than_memory_is_a_limit_error(client, S, N, match):
    """Found by the fuzzer: S x N lanes beyond the memory limit raised numpy's MemoryError while
    allocating the result (and S x N >= 2^32 wrapped around in the core's lane count)."""
    ev = ndvm.Evaluator(client=client)
    prog = ndvm.parse("(define k 2)\n(* a x k)")
    for grad in (False, True):
        for data in ({"x": np.ones(N)}, {"x": list(np.ones(N))}):
            with pytest.raises(ndvm.LimitError, match=match) as info:
                ev.evaluate(prog, params={"a": np.ones(S)}, data=data, grad=grad)
            assert (info.value.line, info.value.col) == (2, 1)
    assert ev.evaluate(prog, params={"a": np.ones(3)}, data={"x": 1.0}).value.shape == (3, 1)


@pytest.mark.parametrize("client", ndvm.clients())
def test_limit_outside_any_form_has_a_position(client):
    """Found by the fuzzer: the memory limit reached while splitting divergent lanes (outside
    any form) raised a LimitError without a line."""
    src = ("(loop ((i 0) (acc 0)) (if (> i 6) (if (pair? acc) (car acc) acc) "
           "(recur (+ i 1) (if (< x (* i 0.15)) (list (+ i a)) (* x i)))))")
    ev = ndvm.Evaluator(client=client, dtype="float32", max_memory=1 << 20)
    with pytest.raises(ndvm.LimitError, match="memory") as info:
        ev.evaluate(src, params={"a": [0.1, 0.6, -0.3]}, data={"x": np.linspace(-1, 2, 1000)},
                    grad=True)
    assert info.value.line == 1


def test_fuzzing_from_threads_is_safe():
    """Cases evaluated concurrently from several threads (one machine per thread)."""
    import random
    errors = []

    def work(seed):
        try:
            for i in range(40):
                check_case(Gen(random.Random(seed * 7919 + i)).case())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    still_usable()


def _unaligned(values):
    buf = np.zeros(8 * len(values) + 1, dtype=np.uint8)
    a = buf[1:].view(np.float64)
    a[:] = values
    assert not a.flags.aligned
    return a


@pytest.mark.parametrize("client", ndvm.clients())
def test_unaligned_input_arrays_are_copied(client):
    """Found by the sanitizer build: arrays deserialized by Dask worker processes can be views
    into a message buffer that are not 8-byte aligned; the core read them through double
    pointers (undefined behaviour; UBSan aborted the workers)."""
    x = np.array([0.5, 1.0, 1.5])
    want = ndvm.Evaluator(client=client).evaluate("(* a (sin x))", params={"a": [1.0, 2.0]},
                                                  data={"x": x}, grad=True)
    ev = ndvm.Evaluator(client=client)
    got = ev.evaluate("(* a (sin x))", params={"a": _unaligned([1.0, 2.0])},
                      data={"x": _unaligned(x)}, grad=True)
    assert np.array_equal(got.value, want.value) and np.array_equal(got.grad["a"], want.grad["a"])
    got = ev.evaluate("(* a (sin x) (vsum v))", params={"a": _unaligned([1.0, 2.0])},
                      data={"x": _unaligned(x)}, consts={"v": _unaligned([1.0])}, grad=True)
    assert np.array_equal(got.value, want.value)
    fit = ndvm.fit("(* a (sin x))", data={"x": _unaligned(x)}, target=_unaligned(2.0 * np.sin(x)),
                   client=client, optimizer="adam", steps=30)
    assert np.isfinite(fit.loss)


@pytest.mark.parametrize("client", ndvm.clients())
@pytest.mark.parametrize("src, value", [
    ("(dot (vec) (vec))", 0.0), ("(vsum (vec))", 0.0), ("(norm (vec))", 0.0),
    ("(vsum (matvec (zeros 2 0) (vec)))", 0.0), ("(vsum (matmul (zeros 2 0) (zeros 0 3)))", 0.0),
    ("(vsum (solve (eye 0) (vec)))", 0.0), ("(vsum (inv (eye 0)))", 0.0),
    ("(vsum (mat (vec)))", 0.0), ("(vsum (ref (zeros 3 0) 1))", 0.0),
    ("(vsum (outer (vec) (vec 1)))", 0.0), ("(vsum (transpose (zeros 0 3)))", 0.0),
    ("(vsum (+ (vec) 1))", 0.0), ("(vsum (sin (vec)))", 0.0), ("(vsum (scale 2 (vec)))", 0.0),
    ("(det (eye 0))", 1.0), ("(logdet (eye 0))", 0.0), ("(trace (zeros 0 0))", 0.0),
])
def test_empty_vectors_and_matrices(src, value, client):
    """Found by the sanitizer build (libstdc++ assertions): primitives on empty vectors and
    matrices indexed the element heap one past its end (`&elems_[size()]`)."""
    assert ndvm.Evaluator(client=client).evaluate(src, grad=True).item() == value

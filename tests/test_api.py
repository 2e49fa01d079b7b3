"""The Python API contract of the SPEC: parse, Program, clients, Evaluator, Result, errors."""
import pickle
import threading

import numpy as np
import pytest

import ndvm
from conftest import CLIENTS

DAMPED = "(* A (* (exp (- 0 (* b t))) (cos (* omega t))))"


def test_parse_and_free_names_in_first_occurrence_order():
    prog = ndvm.parse(DAMPED, name="model.scm")
    assert prog.free_names == ("A", "b", "t", "omega")
    assert prog.name == "model.scm"
    assert prog.source == DAMPED
    assert "omega" in repr(prog)


def test_defined_names_primitives_and_prelude_are_not_free():
    prog = ndvm.parse("(define (f y) (* k y)) (+ (f x) (fold-left + 0 (list a)) (sqrt x))")
    assert prog.free_names == ("k", "x", "a")


def test_top_level_definitions_expand_before_the_expressions_and_the_last_is_the_result():
    """A program's top-level definitions, wherever they stand, are expanded before its
    expressions (free names are numbered in that order); several expressions run in order and
    the last is the result (its position the result's); a program of definitions alone, or with
    one name defined twice, is refused at the definition."""
    prog = ndvm.parse("(+ a b) (define c (* d k)) (* c e)")
    assert prog.free_names == ("d", "k", "a", "b", "e")
    assert prog.result_position == (1, 28)
    got = ndvm.Evaluator().evaluate(prog, data={"a": 1.0, "b": 2.0, "d": 3.0, "k": 4.0, "e": 5.0})
    assert got.value.tolist() == [[60.0]]
    with pytest.raises(ndvm.FormError, match="only definitions") as only:
        ndvm.parse("(define a 1) (define b 2)")
    assert (only.value.line, only.value.col) == (1, 14)
    with pytest.raises(ndvm.FormError, match="duplicate top-level definition of 'a'") as twice:
        ndvm.parse("(define a 1) x (define a 2) a")
    assert (twice.value.line, twice.value.col) == (1, 16)


def test_every_primitive_and_prelude_function_is_found_and_a_definition_shadows_it():
    """The expander finds a name in an index of the primitives and one of the prelude's
    definitions (each made once): every name of both resolves, a name of neither is free, and a
    user's definition or local binding of such a name comes first."""
    from ndvm._core._core import primitives

    for p in primitives():
        assert ndvm.parse(f"(list {p['name']} x)").free_names == ("x",), p["name"]
    for f in ("map", "filter", "fold-left", "fold-right", "reduce", "iota", "list-tail", "any",
              "every"):
        assert ndvm.parse(f"(list {f} x)").free_names == ("x",), f
    assert ndvm.parse("(+ mapx sinx fold)").free_names == ("mapx", "sinx", "fold")
    ev = ndvm.Evaluator()
    assert ev.evaluate("(define (map f xs) (* 2 xs)) (map a 3)", params={"a": 0.0}).item() == 6
    assert ev.evaluate("(define sin 3) (+ sin 1)").item() == 4
    assert ev.evaluate("(let ((sqrt (lambda (u) (* 10 u)))) (sqrt 4))").item() == 40


def test_program_pickles():
    prog = ndvm.parse(DAMPED, name="m.scm")
    back = pickle.loads(pickle.dumps(prog))
    assert back.free_names == prog.free_names and back.name == "m.scm"
    ev = ndvm.Evaluator()
    p = {"A": 1.0, "b": 0.3, "omega": 2.0, "t": 1.5}
    assert ev.evaluate(back, params=p).item() == ev.evaluate(prog, params=p).item()


def test_clients_lists_both():
    assert "dmci" in ndvm.clients()
    assert ndvm.clients() == tuple(sorted(ndvm.clients()))
    with pytest.raises(ValueError, match="unknown client"):
        ndvm.Evaluator(client="nope")


@pytest.mark.parametrize("client", CLIENTS)
def test_result_shapes_and_derived_gradients(client):
    ev = ndvm.Evaluator(client=client)
    S, N = 3, 5
    a = np.array([0.5, 1.0, 2.0])
    t = np.linspace(0, 2, N)
    res = ev.evaluate(DAMPED, params={"A": a, "b": 0.3, "omega": 2.0}, data={"t": t}, grad=True)
    assert res.value.shape == (S, N)
    assert set(res.grad) == {"A", "b", "omega"}
    for g in res.grad.values():
        assert g.shape == (S,)
    jac = res.jacobian()
    assert jac["A"].shape == (S, N)
    np.testing.assert_allclose(res.grad["b"], jac["b"].sum(axis=1))
    seed = np.arange(S * N, dtype=float).reshape(S, N)
    np.testing.assert_allclose(res.vjp(seed)["omega"], (seed * jac["omega"]).sum(axis=1))
    np.testing.assert_allclose(res.vjp(np.ones((S, N)))["A"], res.grad["A"])
    with pytest.raises(ValueError, match="seed must have shape"):
        res.vjp(np.ones((2, 2)))
    with pytest.raises(ValueError, match="one lane"):
        res.item()


def test_no_grad_result():
    res = ndvm.Evaluator().evaluate("(* a 2)", params={"a": 1.5})
    assert res.grad is None and res.item() == 3.0
    with pytest.raises(ValueError, match="grad=True"):
        res.jacobian()


def test_source_text_is_accepted_and_parameters_unused_by_the_program_get_zero():
    res = ndvm.Evaluator().evaluate("(* a 2)", params={"a": 1.5, "unused": [1.0]}, grad=True)
    assert res.grad["a"][0] == 2.0 and res.grad["unused"][0] == 0.0


def test_consts_number_vector_matrix():
    ev = ndvm.Evaluator()
    res = ev.evaluate("(+ c (vsum v) (trace M))",
                      consts={"c": 1.0, "v": [1.0, 2.0], "M": np.eye(3)})
    assert res.item() == 7.0


@pytest.mark.parametrize("bad, match", [
    (dict(params={"a": [[1.0]]}), "at most 1 dimension"),
    (dict(params={"a": []}), "empty"),
    (dict(params={"a": "x"}), "numeric"),
    (dict(params={"a": 1.0}, data={"a": 2.0}), "both params and data"),
    (dict(params={"a": [1.0, 2.0], "x": [1.0, 2.0, 3.0]}), "starts"),
    (dict(params={"a": 1.0}, data={"x": [1.0, 2.0], "y": [1.0]}), None),
    (dict(params={1: 1.0}), "names"),
])
def test_bad_inputs_raise_clear_errors(bad, match):
    ev = ndvm.Evaluator()
    if match is None:
        ev.evaluate("(* a x)", **bad)  # a 1-element data input is a scalar: fine
        return
    with pytest.raises((ValueError, TypeError), match=match):
        ev.evaluate("(* a x)", **bad)


def test_missing_free_name_is_an_unbound_error_with_position():
    with pytest.raises(ndvm.UnboundError) as info:
        ndvm.Evaluator().evaluate(ndvm.parse("(+ 1\n   (* a x))", name="m.scm"),
                                  params={"a": 1.0})
    e = info.value
    assert (e.line, e.col, e.form, e.file) == (2, 9, "x", "m.scm")
    assert "x" in e.message and e.kind == "UnboundError"
    assert isinstance(e, ValueError)


def test_error_attributes_and_pickling():
    with pytest.raises(ndvm.EvalError) as info:
        ndvm.Evaluator().evaluate("(car 1.0)")
    e = info.value
    assert e.kind == "EvalError" and e.line == 1 and e.col == 1 and e.form == "(car 1.0)"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is ndvm.EvalError and back.line == 1 and str(back) == str(e)


def test_evaluator_arguments_are_checked():
    with pytest.raises(ValueError, match="dtype"):
        ndvm.Evaluator(dtype="float16")
    with pytest.raises(ValueError, match="compat"):
        ndvm.Evaluator(compat="yes")
    with pytest.raises(ValueError, match="max_steps"):
        ndvm.Evaluator(max_steps=0)
    with pytest.raises(TypeError):
        ndvm.Evaluator().evaluate(42)


@pytest.mark.parametrize("client", CLIENTS)
def test_float32(client):
    ev = ndvm.Evaluator(client=client, dtype="float32")
    res = ev.evaluate("(* a 0.1)", params={"a": 3.0}, grad=True)
    assert res.item() == float(np.float32(3.0) * np.float32(0.1))
    assert res.value.dtype == np.float64  # float32 arithmetic, float64 arrays out


@pytest.mark.parametrize("client", CLIENTS)
def test_compat_reference_clamps_sqrt_and_log(client):
    ref = ndvm.Evaluator(client=client, compat="reference")
    ieee = ndvm.Evaluator(client=client)
    assert ref.evaluate("(sqrt -1.0)").item() == pytest.approx(1e-4)
    assert np.isnan(ieee.evaluate("(sqrt -1.0)").item())
    res = ref.evaluate("(log a)", params={"a": -2.0}, grad=True)
    assert res.grad["a"][0] == 0.0


@pytest.mark.parametrize("client", CLIENTS)
def test_concurrent_evaluations_share_programs_safely(client):
    prog = ndvm.parse(DAMPED)
    ev = ndvm.Evaluator(client=client)
    t = np.linspace(0, 3, 64)
    want = ev.evaluate(prog, params={"A": 1.0, "b": 0.3, "omega": 2.0}, data={"t": t},
                       grad=True)
    errors = []

    def work():
        try:
            for _ in range(200):
                r = ev.evaluate(prog, params={"A": 1.0, "b": 0.3, "omega": 2.0}, data={"t": t},
                                grad=True)
                np.testing.assert_array_equal(r.value, want.value)
                np.testing.assert_array_equal(r.grad["b"], want.grad["b"])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_warm_machine_reuses_its_buffers():
    ev = ndvm.Evaluator()
    prog = ndvm.parse("(loop ((k 0) (y a)) (if (= k 50) y (recur (+ k 1) (sin (* y x)))))")
    args = dict(params={"a": np.linspace(0, 1, 16)}, data={"x": np.linspace(0, 1, 16)}, grad=True)
    ev.evaluate(prog, **args)
    before = ev._machine().bytes_in_use
    for _ in range(5):
        ev.evaluate(prog, **args)
    assert ev._machine().bytes_in_use == before


@pytest.mark.parametrize("client", CLIENTS)
def test_native_fast_binding_equals_the_general_path(client):
    """Numbers and float64 vectors are bound natively; lists, other dtypes and consts take the
    Python path. Both must give the same values, gradients and shapes."""
    ev = ndvm.Evaluator(client=client)
    prog = ndvm.parse("(* a (exp (- 0 (* b x))))")
    a = np.array([1.0, 2.0, 3.0])
    x = np.linspace(0.0, 1.0, 4)
    fast = ev.evaluate(prog, params={"a": a, "b": 0.5, "unused": 1.0}, data={"x": x}, grad=True)
    slow = ev.evaluate(prog, params={"a": list(a), "b": [0.5], "unused": [1.0]},
                       data={"x": list(x)}, grad=True)
    np.testing.assert_array_equal(fast.value, slow.value)
    for k in ("a", "b", "unused"):
        np.testing.assert_array_equal(fast.grad[k], slow.grad[k])
        np.testing.assert_array_equal(fast.jacobian()[k], slow.jacobian()[k])
    assert fast.value.shape == (3, 4)
    # mismatched sizes and shared names still get the general path's errors
    with pytest.raises(ValueError, match="starts"):
        ev.evaluate(prog, params={"a": a, "b": np.ones(2)}, data={"x": x})
    with pytest.raises(ValueError, match="both"):
        ev.evaluate(prog, params={"a": 1.0, "b": 1.0, "x": 1.0}, data={"x": x})


@pytest.mark.parametrize("client", CLIENTS)
def test_mse_mode_equals_evaluate_and_vjp(client):
    """Evaluator.mse seeds the sweep with d loss / d value natively (per lane block): its loss
    and gradient equal those computed from the values and the Jacobian."""
    ev = ndvm.Evaluator(client=client)
    prog = ndvm.parse("(if (< x 1.0) (* a (exp (- 0 (* b x)))) (* a (cos (+ (* b x) c))))")
    rng = np.random.default_rng(1)
    S, N = 5, 1000  # 5000 lanes: several lane blocks, a start split across blocks
    params = {"a": rng.normal(1, 0.2, S), "b": rng.normal(0.5, 0.1, S), "c": 0.3}
    x = np.linspace(0.0, 3.0, N)
    y = np.sin(x)
    loss, grad = ev.mse(prog, y, params=params, data={"x": x})
    res = ev.evaluate(prog, params=params, data={"x": x}, grad=True)
    r = res.value - y
    np.testing.assert_allclose(loss, (r * r).mean(axis=1), rtol=1e-12)
    want = res.vjp(2.0 * r / N)
    for k in params:
        np.testing.assert_allclose(grad[k], want[k], rtol=1e-10, atol=1e-14)
    assert grad["c"].shape == (S,)
    loss2, none = ev.mse(prog, y, params=params, data={"x": x}, grad=False)
    np.testing.assert_array_equal(loss, loss2)
    assert none is None
    with pytest.raises(ValueError, match="target"):
        ev.mse(prog, y[:10], params=params, data={"x": x})


@pytest.mark.parametrize("client", ndvm.clients())
def test_pi_is_a_constant_of_the_language_and_can_be_shadowed(client):
    ev = ndvm.Evaluator(client=client)
    prog = ndvm.parse("(* 2 pi x)")
    assert prog.free_names == ("x",)                     # not a parameter to fit
    assert ev.evaluate(prog, data={"x": 1.0}).value[0, 0] == 2 * np.pi
    assert ev.evaluate("(let ((pi 3)) pi)").value[0, 0] == 3.0
    assert ev.evaluate("(define (f pi) (* 2 pi)) (f 1.5)").value[0, 0] == 3.0


def test_baselines_without_torch_is_a_missing_module_so_callers_can_skip(monkeypatch):
    """Without PyTorch, importing ndvm.baselines raises ModuleNotFoundError naming torch (not a
    bare ImportError): pytest.importorskip and other skip-on-missing-module callers skip cleanly
    (a bare ImportError made the oracle tests error on a machine without torch)."""
    import sys
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" now fails
    for name in [m for m in sys.modules if m == "ndvm.baselines" or m.startswith("ndvm.baselines.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError, match="needs PyTorch") as info:
        import ndvm.baselines  # noqa: F401
    assert info.value.name == "torch"


def test_symbolic_regressor_without_scikit_learn_says_what_to_install(tmp_path):
    """Without scikit-learn, ndvm.SymbolicRegressor raises ModuleNotFoundError naming the extra
    to install (it was a bare 'No module named sklearn' from inside ndvm/estimator.py). Run in a
    fresh interpreter, where scikit-learn is made unimportable before ndvm is imported."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "import ndvm\n"
            "try:\n    ndvm.SymbolicRegressor\n"
            "except ModuleNotFoundError as e:\n    print(e.name, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)  # (not a checkout, whose ndvm/ would shadow the install)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sklearn |") and "pip install 'ndvm[sr]'" in out.stdout


@pytest.mark.parametrize("value, said", [
    (None, "got NoneType"), ("1", "got str"), (b"1", "got bytes"), (1j, "got complex"),
    ([1.0, None], "got a list holding NoneType, float"), (np.array(["1"]), "got ndarray"),
])
def test_an_input_that_is_not_a_number_is_refused(value, said):
    # (None was read as nan, "1" as 1.0, 1j as 1.0 without its imaginary part: silently)
    with pytest.raises(TypeError, match=f"parameter 'a' must be numeric, {said}"):
        ndvm.Evaluator().evaluate(ndvm.parse("(* a x)"), params={"a": value},
                                  data={"x": np.ones(2)})


def test_numbers_of_other_types_are_still_read():
    from decimal import Decimal
    from fractions import Fraction
    ev, prog = ndvm.Evaluator(), ndvm.parse("(* a x)")
    for a, want in ((Fraction(1, 2), [[0.5]]), ([Decimal("1.5"), 2], [[1.5], [2.0]]),
                    (True, [[1.0]]), (np.float32(2), [[2.0]])):
        assert ev.evaluate(prog, params={"a": a}, data={"x": 1.0}).value.tolist() == want


def test_params_that_are_not_a_mapping_are_named():
    with pytest.raises(TypeError, match="params is a dict of name -> value, got list"):
        ndvm.Evaluator().evaluate(ndvm.parse("(* a x)"), params=[1, 2], data={"x": 1.0})


@pytest.mark.parametrize("kw, error, said", [
    ({"seed": -1}, ValueError, "seed is a whole number >= 0 or a numpy Generator, got -1"),
    ({"seed": 1.5}, ValueError, "seed is a whole number >= 0"),
    ({"starts": 1.5}, TypeError, "starts must be a whole number, got 1.5"),
    ({"starts": True}, TypeError, "starts must be a whole number, got True"),
    ({"steps": 2.5}, TypeError, "steps must be a whole number, got 2.5"),
    ({"starts": 0}, ValueError, "starts must be at least 1, got 0"),
])
def test_fit_counts_and_seeds_are_checked(kw, error, said):
    # (starts=1.5 was one start, True one, seed=-1 numpy's "expected non-negative integer")
    x = np.linspace(0.0, 1.0, 8)
    with pytest.raises(error, match=said):
        ndvm.fit("(* a x)", data={"x": x}, target=2 * x, **kw)


@pytest.mark.parametrize("kw, said", [({"seed": -1}, "seed is a whole number >= 0, got -1"),
                                      ({"seed": 2.5}, "seed is a whole number >= 0"),
                                      ({"refits": -1}, "refits is a whole number >= 0")])
def test_search_seeds_and_refits_are_checked(kw, said):
    with pytest.raises(ValueError, match=said):
        ndvm.search("damped", max_candidates=4, **kw)

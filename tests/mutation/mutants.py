"""The planted bugs of the mutation run (tests/mutation/run.py); see README.md to add one.

Each mutant replaces `find` (which must occur exactly once in `file`, else the run reports it as
STALE) with `replace`, and runs `tests` (pytest arguments; stop at the first failure). `models`
says what real bug it stands for. `equivalent` is empty, or a one-line reason the mutant cannot
change any observable result (it is then left out of the kill rate).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    find: str
    replace: str
    tests: tuple
    models: str
    equivalent: str = ""


# Test selections (each a tuple of pytest arguments), cheapest first within each.
CF = "tests/test_closed_forms.py::"
GRAD = ("tests/test_gradients.py",)
ELEM = (CF + "test_elementwise_on_a_vector", CF + "test_elementwise_on_a_matrix")
RANDOM = ("tests/test_random_oracle.py::test_random_programs_against_split_and_finite_differences",)
BASE = ("tests/test_baselines.py::test_suite_float64",)
GOLDEN = ("tests/test_golden.py",)
LANES = ("tests/test_lanes.py",)
API = ("tests/test_api.py",)
TORCH = ("tests/test_torch.py", CF + "test_torch_backward_uses_the_upstream_gradient")
FIT = tuple("tests/test_fit.py::" + t for t in (
    "test_recovers_known_parameters", "test_multi_start_runs_starts_as_lanes_and_picks_the_best",
    "test_seeded_starts_are_deterministic", "test_adam_matches_the_update_rule_of_torch_adam",
    "test_zero_factor_in_data", "test_diverging_start_is_retired_without_poisoning_the_others",
    "test_bounds_are_respected")) + tuple(CF + t for t in (
    "test_fit_reaches_the_least_squares_solution",
    "test_fit_reports_the_loss_of_the_parameters_it_returns", "test_fit_starts_from_each_starts_init",
    "test_fit_stops_at_an_active_lower_bound", "test_lm_converges_in_few_steps_on_a_nonlinear_model"))
BLOCKS = API + LANES + (CF + "test_lane_blocks_against_the_closed_form",
                        CF + "test_mse_mode_against_the_closed_form")

DEAD_LANES = (CF + "test_dead_lanes_of_a_singular_matrix_leave_the_gradient_alone",)

DERIV = GRAD + ELEM + BASE + RANDOM       # derivative rules
FLOW = GOLDEN + LANES + GRAD + BASE + RANDOM  # control flow, masks, merges
OPT = FIT                                  # optimizers
FT = "tests/test_fit.py::"
ADAM = (FT + "test_adam_matches_the_update_rule_of_torch_adam",) + OPT
LMT = (CF + "test_lm_converges_in_few_steps_on_a_nonlinear_model",) + OPT
GROWS = (FT + "test_lm_trust_region_grows_after_successful_steps",)
LBFGS = (CF + "test_fit_reaches_the_least_squares_solution",) + OPT
BOUNDS = (CF + "test_fit_stops_at_an_active_lower_bound", FT + "test_bounds_are_respected") + OPT
OO = "tests/test_optimizer_oracles.py::"
POSITIVE = (OO + "test_adam_on_a_positive_parameter_is_torch_adam_on_its_logarithm",
            OO + "test_a_positive_parameter_reaches_the_unconstrained_optimum")
MONO = (OO + "test_lm_and_lbfgs_never_accept_a_point_worse_than_the_current_one",)
HELD = (OO + "test_a_parameter_held_at_its_bound_lets_the_others_reach_their_optimum",)
WOLFE = (OO + "test_every_lbfgs_step_meets_the_strong_wolfe_conditions",)
BRACKET = (OO + "test_lbfgs_zooms_inside_the_first_bracket_when_sufficient_decrease_fails",)
SCALE = (OO + "test_lbfgs_is_invariant_to_a_scaling_of_the_loss",)
CURVATURE = (OO + "test_lbfgs_forgets_a_step_of_negative_curvature",)
COV = (OO + "test_standard_errors_of_a_linear_model_are_the_ols_closed_form",
       OO + "test_standard_errors_of_a_nonlinear_model_match_scipy_curve_fit")

# why the reverse sweep's lane masks cannot change a result (see the mask-acc-* mutants)
DEAD_ADJOINTS_ARE_ZERO = ("dead lanes' adjoints are exactly 0 (a select passes its adjoint only to "
                          "the lanes of each arm, every accumulation skips zero adjoints), so the "
                          "masks in the sweep are belt and braces")

OPS = "ndvm/_core/ops.hpp"
VMATH = "ndvm/_core/vmath.hpp"
SWEEP = "ndvm/_core/sweep.hpp"
LINALG = "ndvm/_core/linalg.hpp"
NUM = "ndvm/_core/numeric.hpp"
WALK = "ndvm/_core/walk.hpp"
PYX = "ndvm/_core/_core.pyx"
EXE = "ndvm/_core/execute.hpp"
KERN = "ndvm/_core/kernels.cpp"
KERNH = "ndvm/_core/kernels.hpp"
MACH = "ndvm/_core/machine.hpp"
FITDIR = "ndvm/_core/fit/"
ADAMH = FITDIR + "adam.hpp"
LBFGSH = FITDIR + "lbfgs.hpp"
LMFH = FITDIR + "lm.hpp"
DRVH = FITDIR + "driver.hpp"
OUTH = FITDIR + "outputs.hpp"
LMH = FITDIR + "lsq.hpp"
LSH = FITDIR + "linesearch.hpp"
DMCI = "clients/dmci/eval.hpp"
VM = "clients/bytecode/vm.hpp"

MUTANTS = [
    # ---- controls: no behaviour change, a rebuild all the same; a kill means a broken setup --
    Mutant("control-core-comment", SWEEP, "// The reverse sweep: seeds",
           "// (control) The reverse sweep: seeds", DERIV,
           "nothing: checks that the unmutated core passes the derivative tests",
           "a comment"),
    Mutant("control-python-comment", "ndvm/fit.py",
           '__all__ = ["EvaluateAfter", "FitOptions", "FitResult", "fit", "fit_with", "OPTIMIZERS",'
           ' "STATUS"]',
           '__all__ = ["EvaluateAfter", "FitOptions", "FitResult", "fit", "fit_with", "OPTIMIZERS",'
           ' "STATUS"]  # (control)', OPT,
           "nothing: checks that the unmutated tree passes the optimizer tests", "a comment"),
    # ---- derivative rules (tape.hpp scalar partials, numeric.hpp reverse sweep) -------------
    Mutant("num-mod-db-trunc", OPS, "{ da = T(1); db = -std::floor(a / b); }",
           "{ da = T(1); db = -std::trunc(a / b); }", DERIV,
           "d modulo / d b uses truncation (remainder's rule) instead of floor"),
    Mutant("num-mod-db-trunc-random", OPS, "{ da = T(1); db = -std::floor(a / b); }",
           "{ da = T(1); db = -std::trunc(a / b); }", RANDOM,
           "the issue's example again, against the random-program oracles alone (the "
           "hand-written finite-difference case in test_gradients.py was its only killer)"),
    Mutant("num-rem-db-floor", OPS, "{ da = T(1); db = -std::trunc(a / b); }",
           "{ da = T(1); db = -std::floor(a / b); }", DERIV,
           "d remainder / d b uses floor (modulo's rule)"),
    Mutant("num-atan2-da-sign", OPS, "    da = b / r;\n", "    da = -b / r;\n", DERIV,
           "wrong sign of d atan2(a, b) / d a"),
    Mutant("num-atan-d", OPS, "static T d(T x, T) { return T(1) / (T(1) + x * x); }",
           "static T d(T x, T) { return T(1) / (T(1) - x * x); }", DERIV,
           "d atan(x) = 1 / (1 - x^2)"),
    Mutant("num-pow-db-nolog", OPS, "bb[l] = a.p[l * a.stride] > T(0) ? y[l] * bb[l] : T(0);",
           "bb[l] = a.p[l * a.stride] > T(0) ? y[l] : T(0);", DERIV,
           "d a^b / d b forgets the log a factor"),
    Mutant("num-pow-da-exponent", OPS, "ba[l] = b.p[l * b.stride] - T(1);",
           "ba[l] = b.p[l * b.stride];", DERIV, "d a^b / d a = b a^b"),
    Mutant("num-abs-d", OPS,
           "static T d(T x, T) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }",
           "static T d(T x, T) { return x < T(0) ? T(1) : (x > T(0) ? T(-1) : T(0)); }", DERIV,
           "d |x| has the wrong sign on both sides"),
    Mutant("num-tan-d", OPS, "static T d(T, T y) { return T(1) + y * y; }",
           "static T d(T, T y) { return T(1) - y * y; }", DERIV, "d tan = 1 - tan^2 (tanh's rule)"),
    Mutant("num-tanh-d", OPS, "static T d(T, T y) { return T(1) - y * y; }",
           "static T d(T, T y) { return T(1) + y * y; }", DERIV, "d tanh = 1 + tanh^2 (tan's rule)"),
    Mutant("num-log-d", OPS, "static T d(T x, T) { return T(1) / x; }",
           "static T d(T, T y) { return T(1) / y; }", DERIV,
           "d log x = 1 / log x (output instead of input)"),
    Mutant("num-sqrt-d", OPS, "static T d(T, T y) { return T(0.5) / y; }",
           "static T d(T x, T) { return T(0.5) / x; }", DERIV, "d sqrt x = 1 / (2 x)"),
    Mutant("num-cos-d-sign", OPS,
           "    vmath::apply(vmath::Fn::Sin, x, buf, L);\n"
           "    for (uint32_t l = 0; l < L; ++l) buf[l] = -buf[l];\n",
           "    vmath::apply(vmath::Fn::Sin, x, buf, L);\n", DERIV,
           "d cos = +sin (the sign of the derivative lost; the old core's rule put it on sin)"),
    Mutant("vmath-pow-varying-base", VMATH, "vpow(sa ? vload(a + i) : a0, sb ? vload(b + i) : b0)",
           "vpow(a0, sb ? vload(b + i) : b0)", LANES + DERIV,
           "a varying base read as its first lane (the stride of the vector kernel's operand)"),
    Mutant("vmath-pow-tail", VMATH,
           "vstore(ba, vpow(vload(ba), vload(bb)));",
           "vstore(ba, vpow(vload(ba), vload(ba)));",
           LANES + DERIV, "the padded tail's lanes raised to their bases, not their exponents"),
    Mutant("vmath-tanh-kernel", VMATH, "case Fn::Tanh: return _ZGVdN4v_tanh(v);",
           "case Fn::Tanh: return _ZGVdN4v_sin(v);", LANES + ELEM,
           "tanh's lanes on another function's vector kernel"),
    Mutant("num-div-db-sign", OPS, "da = T(1) / b; db = -y / b;", "da = T(1) / b; db = y / b;",
           DERIV, "d (a / b) / d b has the wrong sign"),
    Mutant("num-sub-db-sign", OPS, "    da = constant<T, 1>();\n    db = constant<T, -1>();",
           "    da = constant<T, 1>();\n    db = constant<T, 1>();", DERIV, "d (a - b) / d b = +1"),
    Mutant("num-mul-swap", OPS,
           "    da = b;  // the operands' own lanes: nothing to compute\n    db = a;",
           "    da = a;  // the operands' own lanes: nothing to compute\n    db = b;",
           DERIV, "d (a b) / d a = a: each factor gets its own value"),
    Mutant("num-minmax-ties", SWEEP, "T share = v.g[l] / T(ties);", "T share = v.g[l];", DERIV,
           "min/max ties give every tied argument the full gradient (the reference's bug)"),
    Mutant("num-dot-skip-b", SWEEP, "    v.acc(2 * i + 1, v.lanes(2 * i));\n", "", DERIV,
           "dot (and vsum, matvec, matmul, trace) passes no gradient to its second operand"),
    Mutant("num-det2-cofactor", LINALG, "add(1, l, -w * c);", "add(1, l, w * c);", DERIV,
           "2x2 det gradient: a cofactor with the wrong sign"),
    Mutant("num-inv2-sign", LINALG, "r0[l] = -(m00 * y0[l] + m01 * y1[l]);",
           "r0[l] = (m00 * y0[l] + m01 * y1[l]);", DERIV,
           "2x2 inverse gradient: -Y^T G Y^T loses its sign in one entry"),
    Mutant("num-logdet-scale", LINALG, "T scale = op == Op::Det ? gl * det : gl;",
           "T scale = gl * det;", DERIV, "n x n logdet gradient scaled by the determinant"),
    Mutant("num-solve-db-transpose", LINALG, "s += M[j * n + r] * G[j * k + c];",
           "s += M[r * n + j] * G[j * k + c];", DERIV,
           "solve's (and the n x n inverse's, which shares the rule) gradient uses A^-1 "
           "instead of A^-T"),
    Mutant("num-mod-forward", OPS,
           "if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;",
           "if (r != T(0) && ((r < T(0)) != (b < T(0)))) r -= b;", DERIV + GOLDEN,
           "modulo with operands of different signs (forward value)"),
    Mutant("num-fold-sub-zero", NUM, "(op == Op::Sub && is(b, 0.0))", "(op == Op::Sub && is(a, 0.0))",
           (CF + "test_arithmetic_with_a_uniform_zero_or_one_operand",) + DERIV + GOLDEN,
           "the identity fold of x - 0 fires on 0 - x instead (returns the 0)"),
    # ---- tape accumulation and the reverse sweep ---------------------------------------------
    Mutant("tape-binary-overwrite", KERNH,
           "      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free\n"
           "      put<kSet>(d[l], g[l] != T(0) ? v : T(0));",
           "      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free\n"
           "      d[l] = g[l] != T(0) ? v : T(0);", DERIV,
           "an adjoint is overwritten instead of accumulated (a value used twice)"),
    Mutant("tape-seed-ignored", SWEEP, "g0[l] = seed ? seed[l] : T(1);", "g0[l] = T(1);",
           API + TORCH, "the reverse sweep ignores the caller's seed (vjp, torch, mse)"),
    Mutant("tape-zero-adjoint-nan", KERNH,
           "      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free\n"
           "      put<kSet>(d[l], g[l] != T(0) ? v : T(0));",
           "      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free\n"
           "      put<kSet>(d[l], v);",
           ("tests/test_gradients.py::test_a_zero_adjoint_times_an_infinite_partial_is_zero",)
           + DERIV,
           "a zero upstream adjoint times an infinite partial leaks NaN (0 * inf)"),
    Mutant("tape-mse-seed", EXE, "sd[k] = T(2.0 * r * inv_n);", "sd[k] = T(r * inv_n);",
           BLOCKS, "the MSE mode seeds d loss / d value without the factor 2"),
    # ---- masks, select merge, partitions ------------------------------------------------------
    Mutant("mask-acc-unmasked", SWEEP, "live(n.mask >= 0 ? mm.mask_ptr(n.mask) : nullptr),",
           "live(nullptr),", DEAD_LANES + FLOW,
           "the sweep ignores every node's lane mask (all op families: elementwise, select, "
           "min/max, linear algebra)"),
    Mutant("mask-acc-plus-unmasked", KERNH, "      if (live[l]) put<kSet>(d[l], sign * g[l]);",
           "      if (true) put<kSet>(d[l], sign * g[l]);", FLOW, "acc_plus ignores the lane mask",
           DEAD_ADJOINTS_ARE_ZERO),
    Mutant("mask-acc-times-unmasked", KERNH,
           "      if (live[l] && g[l] != T(0)) put<kSet>(d[l], g[l] * b[l * bs]);",
           "      if (g[l] != T(0)) put<kSet>(d[l], g[l] * b[l * bs]);", FLOW,
           "acc_times ignores the lane mask",
           DEAD_ADJOINTS_ARE_ZERO),
    Mutant("mask-branch-ignores-live", MACH, "      out[l] = m ? uint8_t(b & m[l]) : b;",
           "      out[l] = b;", FLOW, "a nested branch's masks forget the enclosing live lanes"),
    Mutant("select-swap-adjoint", SWEEP, "    if (m[l]) {\n      if (ga) ga[l] += v.g[l];",
           "    if (!m[l]) {\n      if (ga) ga[l] += v.g[l];", FLOW,
           "the select's adjoint goes to the arm the lane did not take"),
    Mutant("select-forward-swap", NUM, "y[l] = m[l] ? x[l * sa] : z[l * sb];",
           "y[l] = m[l] ? z[l * sb] : x[l * sa];", FLOW,
           "the merged value takes the other arm's lanes"),
    Mutant("partition-leaks-dead-lanes", EXE, "p2[l] = on && !d.part[l];", "p2[l] = !d.part[l];",
           FLOW, "re-running a partition also runs lanes outside the enclosing mask"),
    # ---- lane blocks and input binding ----------------------------------------------------------
    Mutant("block-jac-offset", EXE, "double* dst = o + l0;",
           "double* dst = o;", BLOCKS,
           "every lane block writes its Jacobian rows at lane 0"),
    Mutant("block-data-offset", EXE, "n = m.lane0_ % m.N_; l < m.L_; n = 0)",
           "n = 0; l < m.L_; n = 0)", BLOCKS,
           "a lane block binds data from point 0 instead of its first lane's point"),
    Mutant("block-param-start", EXE,
           "uint32_t g = m.lane0_ + l, st = g / m.N_, run = std::min(m.N_ - g % m.N_, m.L_ - l);",
           "uint32_t g = m.lane0_ + l, st = l / m.N_, run = std::min(m.N_ - g % m.N_, m.L_ - l);",
           BLOCKS, "a lane block binds parameters of the wrong start"),
    Mutant("block-size-tiny", EXE, "constexpr uint32_t kLaneBlock = 2048;",
           "constexpr uint32_t kLaneBlock = 7;", BLOCKS + GRAD + FIT,
           "lane blocks of 7 lanes (a start split across blocks everywhere)",
           "blocks are exact by design: any block size gives the same bits (kept as a check "
           "that the split is exact)"),
    Mutant("bind-param-n1", EXE, "copy_lanes(p, b.values + m.lane0_, m.L_);",
           "copy_lanes(p, b.values, m.L_);", BLOCKS,
           "with one data point, a lane block binds the first starts' parameters"),
    Mutant("bind-py-rows", PYX, "            b._bs[i].rows = 0 if n == 1 else n",
           "            b._bs[i].rows = n", BLOCKS + GRAD,
           "a one-element parameter (or data) array is bound as a 1-start vector (read past its "
           "end when other inputs have S > 1 starts or N > 1 points); now in ndvm._core.bind"),
    # ---- the clients ----------------------------------------------------------------------------
    Mutant("walk-mixed-else-mask", WALK, "  m.live_ = mf;\n  Value b = else_side();",
           "  m.live_ = mt;\n  Value b = else_side();", FLOW,
           "a divergent branch's else arm runs under the then arm's mask (was dmci's own "
           "mixed branch; both clients now share walk.hpp's)"),
    Mutant("dmci-and-swap", DMCI, "if (is_and) return mixed(a, n->kids[1], nullptr, nullptr, &a, env);",
           "if (is_and) return mixed(a, nullptr, n->kids[1], &a, nullptr, env);", FLOW,
           "dmci's divergent `and` returns the second operand where the first is false"),
    Mutant("dmci-rest-drops-last", DMCI,
           "for (size_t i = argc; i > lam->nparams; --i) rest = m_.cons(m_.stack_[base + i - 1], rest);",
           "for (size_t i = argc - 1; i > lam->nparams; --i) rest = m_.cons(m_.stack_[base + i - 1], rest);",
           FLOW, "dmci drops the last rest argument"),
    Mutant("vm-if-arms-swap", VM, "Value v = mixed(t, pc, code_ + ins.b, nullptr, nullptr, k, env, sp);",
           "Value v = mixed(t, code_ + ins.b, pc, nullptr, nullptr, k, env, sp);", FLOW,
           "the VM runs a divergent branch's arms under each other's masks"),
    Mutant("vm-or-swap", VM, ": mixed(a, nullptr, pc, &a, nullptr, k, env, sp);",
           ": mixed(a, pc, nullptr, nullptr, &a, k, env, sp);", FLOW,
           "the VM's divergent `or` evaluates the second operand where the first is true"),
    Mutant("vm-recur-order", VM,
           "            sp -= l.nvars;\n            for (uint32_t i = 0; i < l.nvars; ++i) f->slots[i] = sp[i];\n            env = f;\n            pc = code_ + l.body;",
           "            sp -= l.nvars;\n            for (uint32_t i = 0; i < l.nvars; ++i) f->slots[l.nvars - 1 - i] = sp[i];\n            env = f;\n            pc = code_ + l.body;",
           FLOW, "the VM's recur binds the loop variables in reverse order"),
    # ---- optimizers (fit/: adam.hpp, lbfgs.hpp, lm.hpp on driver.hpp; lsq.hpp: QR, SVD, trust
    # region, covariance; linesearch.hpp: strong Wolfe; outputs.hpp: the best start; fit.py) ---
    Mutant("fit-adam-bias", ADAMH, "double step = rq_.lr / bc1;", "double step = rq_.lr;", ADAM,
           "Adam without the first-moment bias correction"),
    Mutant("fit-adam-bc2", ADAMH, "double denom = std::sqrt(v[i]) / bc2s + rq_.eps;",
           "double denom = std::sqrt(v[i]) + rq_.eps;", ADAM,
           "Adam without the second-moment bias correction"),
    Mutant("fit-positive-chain", DRVH, "if (is_log(i / S_)) grad_[i] *= xe_[i];",
           "if (is_log(i / S_)) grad_[i] *= 1.0;", POSITIVE + OPT,
           "a parameter optimized as its logarithm gets d loss / d x instead of d loss / d log x "
           "(the chain rule's factor x forgotten)"),
    Mutant("fit-lm-uphill", LMH, "z[i] = s > floor || par > 0.0 ? -gt[i] / (s * s + par) : 0.0;",
           "z[i] = s > floor || par > 0.0 ? gt[i] / (s * s + par) : 0.0;", LMT,
           "the Levenberg-Marquardt step points along +J^T r (uphill)"),
    Mutant("fit-lm-householder", LMH, "uj[j] = (a[j] - alpha) * inv;",
           "uj[j] = (a[j] + alpha) * inv;", LMT,
           "the Householder vector has the wrong sign: Q^T J is not triangular, R and Q^T f wrong"),
    Mutant("fit-lm-radius-shrinks", LMFH, "      m.delta = m.pnorm / 0.5;",
           "      m.delta = m.pnorm * 0.5;", GROWS + LMT,
           "a very successful step halves the trust region instead of doubling it"),
    Mutant("fit-lm-accept-any", LMFH, "if (ratio >= 1e-4) {", "if (ratio >= -1e300) {", MONO + LMT,
           "LM accepts a trial that increases the residual (the ratio test is lost)"),
    Mutant("fit-lm-gnorm-zero", LMFH,
           "for (size_t i = 0; i <= j; ++i) sum += m.F.R[i * P_ + j] * (m.F.qtf[i] / m.fnorm);",
           "for (size_t i = 0; i < j; ++i) sum += m.F.R[i * P_ + j] * (m.F.qtf[i] / m.fnorm);",
           LMT, "LM's gradient test skips R's diagonal: the first column's cosine is always 0, "
           "a one-parameter fit stops at once (gtol) wherever it starts"),
    Mutant("fit-lm-svd-rotation", LMH, "          double zeta = (be - al) / (2.0 * ga);",
           "          double zeta = (al - be) / (2.0 * ga);", LMT,
           "the Jacobi rotation angle of the SVD has the wrong sign (columns never orthogonalize)"),
    Mutant("fit-cov-dof", LMH, "double s2 = N > P ? rss / double(N - P) : inf;",
           "double s2 = N > P ? rss / double(N) : inf;", COV + OPT,
           "the residual variance divides by N instead of N - P (standard errors too small)"),
    Mutant("fit-lbfgs-gamma", LBFGSH, "double gamma = 1.0 / (b.rho[i] * yy);",
           "double gamma = b.rho[i] * yy;", SCALE + WOLFE + MONO + LBFGS,
           "L-BFGS initial Hessian scaling inverted (y^T y / s^T y)"),
    Mutant("fit-lbfgs-two-loop", LBFGSH, "q[p] += si[p] * (b.al[i] - be);",
           "q[p] += si[p] * (be - b.al[i]);", LBFGS,
           "the second loop of the L-BFGS two-loop recursion subtracts the correction"),
    Mutant("fit-lbfgs-curvature-pair", LBFGSH,
           "if (sy > lm::kEps * yy && std::isfinite(sy) && yy > 0) {",
           "if (std::isfinite(sy) && yy > 0) {", CURVATURE + SCALE + WOLFE + MONO + LBFGS,
           "L-BFGS keeps (s, y) pairs of negative curvature (the inverse Hessian loses "
           "positive definiteness)"),
    Mutant("fit-wolfe-armijo", LSH, "bool armijo = f <= f0_ + c1 * a * d0_;",
           "bool armijo = f <= f0_ - c1 * a * d0_;", BRACKET + WOLFE + MONO + LBFGS,
           "the sufficient-decrease test accepts steps that increase the loss"),
    Mutant("fit-wolfe-curvature", LSH, "      if (std::fabs(d) <= -c2 * d0_) return Accept;",
           "      if (d <= -c2 * d0_) return Accept;", WOLFE + LBFGS,
           "the strong Wolfe curvature test without its absolute value: d <= 0.9 |d0| holds "
           "for any step still descending, so a step far too short is accepted"),
    Mutant("fit-project-lower", DRVH, "v = std::min(std::max(v, lo_[p]), hi_[p]);",
           "v = std::min(v, hi_[p]);", BOUNDS, "the lower bound is not projected (Adam, the start)"),
    Mutant("fit-lbfgs-held", LBFGSH, "if (held(p, b.d[p])) b.d[p] = 0.0;", "", HELD + BOUNDS,
           "L-BFGS does not hold a variable at an active bound (the line search's largest "
           "step becomes 0)"),
    Mutant("fit-lm-clip", LMFH, "v = std::min(std::max(u0 + step, lo_[j]), hi_[j]);",
           "v = u0 + step;", BOUNDS, "an LM trial is not clipped to the bounds"),
    Mutant("fit-best-tracking", DRVH, "    if (f < best_[s]) {",
           "    if (f > best_[s] || std::isinf(best_[s])) {", OPT,
           "the optimizers keep the worst point seen instead of the best"),
    Mutant("fit-best-start", OUTH, "if (std::isfinite(f[i]) && f[i] < least) {",
           "if (std::isfinite(f[i]) && (std::isinf(least) || f[i] > least)) {",
           OPT, "fit reports the worst start"),
    Mutant("fit-py-best-start", "ndvm/fit.py",
           "np.nanargmin(np.where(np.isfinite(self.all_losses), self.all_losses, np.inf))",
           "np.nanargmax(np.where(np.isfinite(self.all_losses), self.all_losses, -np.inf))",
           ("tests/test_parallel.py::test_the_best_start_is_the_first_of_least_finite_loss",)
           + OPT, "FitResult.best_start (its message, converged flag and the CLI) is the worst "
           "start (the parameters and loss are the native batch's pick)"),
    Mutant("fit-py-clip-init", "ndvm/fit.py",
           "        x0 = np.clip(x0, lower[:, None], upper[:, None])",
           "        x0 = np.clip(x0, lower[:, None], None)", OPT,
           "initial values are not clipped to the upper bound",
           "the native fit projects every point, the first included, onto the bounds"),
    Mutant("fit-py-init-vector", "ndvm/fit.py",
           "out[i] = v.reshape(-1) if v.ndim == 1 and v.size == S else float(v.reshape(-1)[0])",
           "out[i] = float(v.reshape(-1)[0])", OPT,
           "a per-start init vector is collapsed to its first value"),
]

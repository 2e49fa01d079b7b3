// Native calibration: Adam, L-BFGS and Levenberg-Marquardt over S starts at once. Every step is
// one batched evaluation of the program (S*N lanes, through the client's entry point) plus a few
// operations per start in C++ — no Python per step. Starts are independent: each keeps its own
// optimizer state and its own stop reason (FitStatus); a start that stops is frozen while the
// others go on. Adam and L-BFGS read each start's loss and gradient from the core's MSE mode (no
// per-lane Jacobian); LM reads the per-lane Jacobian rows. Optimizers work on internal
// coordinates: a parameter flagged positive is optimized as its logarithm.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "client_api.hpp"
#include "linesearch.hpp"
#include "lm.hpp"

namespace ndvm {

enum class Optimizer : int { Adam = 0, LBFGS = 1, LM = 2 };
enum class LossKind : int { MSE = 0, Value = 1 };
// LM's trust-region scaling (see Fitter::lm): MINPACK's column scaling, none, or both as two lanes
enum class Scaling : int { Jac = 0, Unscaled = 1, Both = 2 };

// Why a start stopped. 0..4 are scipy.optimize.least_squares's codes; converged means 1..4.
enum FitStatus : int8_t {
  kDegenerate = -3,  // stopped where a parameter no longer affects the model (column vanished)
  kNonFinite = -2,   // the loss or gradient is not finite at the start, or around the stop point
  kNoProgress = -1,  // no further progress possible (line search / trust region at its limit)
  kBudget = 0,       // the evaluation budget (steps) ran out before a tolerance was met
  kGtol = 1,         // gradient test met
  kFtol = 2,         // relative reduction of the loss below ftol
  kXtol = 3,         // relative step (trust-region radius) below xtol
  kFtolXtol = 4,     // both
};

struct FitRequest {
  ClientEntry entry = nullptr;
  void* machine = nullptr;
  int dtype = 0;
  const void* expanded = nullptr;
  const void* compiled = nullptr;
  std::vector<Binding> bindings;    // one per free name; parameters point into `params`
  std::vector<int> param_binding;   // for each fitted parameter, its index in `bindings`
  uint32_t S = 1, N = 1;
  const double* target = nullptr;   // [N] (MSE loss)
  Optimizer optimizer = Optimizer::Adam;
  int steps = 50;                   // Adam: steps; LM, L-BFGS: evaluation budget
  double lr = 0.05, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double tol = 1e-10;               // xtol (LM): stop when the radius is below tol * ||D x||
  double ftol = 1e-10;              // LM, L-BFGS: relative reduction of the loss
  double gtol = 1e-10;              // LM: cosine of residual and Jacobian columns; others: gradient
  int loss = 0;                     // LossKind
  const uint8_t* positive = nullptr;  // [P] or null: optimized as log(x), so it stays above 0
  Scaling scaling = Scaling::Both;  // LM only
  bool uncertainty = true;          // MSE: covariance and standard errors at each start's best
  const double* lower = nullptr;    // [P] or null
  const double* upper = nullptr;
  // in: initial values [P][S]; out: the best parameters seen per start
  double* params = nullptr;
  double* losses = nullptr;         // out [S]: best loss per start
  double* history = nullptr;        // out [steps][S]: loss at each step (NaN once retired)
  uint8_t* converged = nullptr;     // out [S]
  int8_t* status = nullptr;         // out [S] or null: FitStatus
  double* cov = nullptr;            // out [S][P][P] or null
  double* stderr_ = nullptr;        // out [S][P] or null
  uint8_t* flags = nullptr;         // out [S][P] or null: 1 not identifiable, 2 column vanished
  int64_t n_evals = 0;              // out
};

class Fitter {
 public:
  explicit Fitter(FitRequest& rq)
      : Fitter(rq, rq.scaling == Scaling::Unscaled ? 0 : rq.S) {}

  void run() {
    if (rq_.optimizer == Optimizer::LM && rq_.scaling == Scaling::Both) return run_both();
    size_t L = size_t(S_) * N_;
    value_.resize(L);
    loss_.assign(S_, 0.0);
    grad_.assign(P_ * S_, 0.0);
    jac_ptrs_.assign(rq_.bindings.size(), nullptr);
    grad_ptrs_.assign(rq_.bindings.size(), nullptr);
    for (size_t p = 0; p < P_; ++p) grad_ptrs_[rq_.param_binding[p]] = grad_.data() + p * S_;
    xe_.assign(P_ * S_, 0.0);
    lo_.assign(P_, -kInf);
    hi_.assign(P_, kInf);
    for (size_t p = 0; p < P_; ++p) {
      bool lg = is_log(p);
      if (rq_.lower) lo_[p] = lg ? (rq_.lower[p] > 0 ? std::log(rq_.lower[p]) : -kInf) : rq_.lower[p];
      if (rq_.upper) hi_[p] = lg ? (rq_.upper[p] > 0 ? std::log(rq_.upper[p]) : -kInf) : rq_.upper[p];
    }
    u_.assign(P_ * S_, 0.0);
    for (size_t i = 0; i < P_ * S_; ++i) {
      double v = rq_.params[i];
      u_[i] = is_log(i / S_) ? std::log(v) : v;
    }
    project(u_);
    best_u_ = u_;
    best_.assign(S_, kInf);
    retired_.assign(S_, 0);
    done_.assign(S_, 0);
    status_.assign(S_, kBudget);
    flags_.assign(P_ * S_, 0);
    for (size_t k = 0; k < size_t(rq_.steps) * S_; ++k) rq_.history[k] = std::nan("");
    switch (rq_.optimizer) {
      case Optimizer::Adam: adam(); break;
      case Optimizer::LBFGS: lbfgs(); break;
      case Optimizer::LM: lm(); break;
    }
    if (rq_.optimizer != Optimizer::LM && rq_.uncertainty && mse()) uncertainty_at_best();
    for (size_t i = 0; i < P_ * S_; ++i) rq_.params[i] = external(i / S_, best_u_[i]);
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) status_[s] = kNonFinite;
      rq_.losses[s] = best_[s];
      rq_.converged[s] = status_[s] > 0;
      if (rq_.status) rq_.status[s] = status_[s];
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (uint32_t s = 0; s < S_; ++s) {  // no uncertainty for a start without a finite fit
      if (!retired_[s] && uncertainty_done_) continue;
      if (rq_.cov) std::fill(rq_.cov + size_t(s) * P_ * P_, rq_.cov + size_t(s + 1) * P_ * P_, nan);
      if (rq_.stderr_) std::fill(rq_.stderr_ + size_t(s) * P_, rq_.stderr_ + size_t(s + 1) * P_, nan);
    }
    if (rq_.flags)
      for (size_t p = 0; p < P_; ++p)
        for (uint32_t s = 0; s < S_; ++s) rq_.flags[s * P_ + p] = flags_[p * S_ + s];
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  enum Need { kLoss, kGrad, kJac };

  // LM: starts from `unscaled_from` on run without column scaling
  Fitter(FitRequest& rq, uint32_t unscaled_from)
      : rq_(rq), S_(rq.S), N_(rq.N), P_(rq.param_binding.size()), unscaled_from_(unscaled_from) {}

  FitRequest& rq_;
  uint32_t S_, N_;
  size_t P_;
  uint32_t unscaled_from_;
  std::vector<double> value_, u_, xe_, best_u_, best_, loss_, grad_, lo_, hi_;
  std::vector<std::vector<double>> jac_;  // [P][S*N], filled by kJac evaluations
  std::vector<double*> jac_ptrs_, grad_ptrs_;
  std::vector<uint8_t> retired_, done_, flags_;
  std::vector<int8_t> status_;
  bool uncertainty_done_ = false;  // cov and stderr were written for every start not retired

  bool mse() const { return rq_.loss == int(LossKind::MSE); }
  bool is_log(size_t p) const { return rq_.positive && rq_.positive[p]; }
  double external(size_t p, double u) const { return is_log(p) ? std::exp(u) : u; }
  bool live(uint32_t s) const { return !retired_[s] && !done_[s]; }
  bool bounded() const { return rq_.lower || rq_.upper; }

  void stop(uint32_t s, int8_t why) {
    done_[s] = 1;
    status_[s] = why;
  }

  // LM with scaling "both": every start runs twice, as lanes of one fit of 2 S starts, with
  // MINPACK's column scaling (starts 0..S-1) and without (S..2S-1); each start keeps the lane
  // of lower loss (on a tie, the one that converged), with that lane's point, status, history,
  // covariance and flags. n_evals counts the batched evaluations of both lanes together.
  void run_both() {
    const uint32_t S = S_, S2 = 2 * S_;
    const size_t P = P_, steps = size_t(rq_.steps);
    FitRequest sub = rq_;
    sub.S = S2;
    sub.scaling = Scaling::Jac;
    sub.n_evals = 0;
    std::vector<double> params(P * S2), losses(S2), history(steps * S2), cov, se;
    std::vector<uint8_t> conv(S2), flags(S2 * P);
    std::vector<int8_t> status(S2);
    for (size_t p = 0; p < P; ++p)
      for (uint32_t s = 0; s < S; ++s)
        params[p * S2 + s] = params[p * S2 + S + s] = rq_.params[p * S + s];
    sub.params = params.data();
    sub.losses = losses.data();
    sub.history = history.data();
    sub.converged = conv.data();
    sub.status = status.data();
    sub.flags = flags.data();
    if (rq_.cov) cov.resize(S2 * P * P), sub.cov = cov.data();
    if (rq_.stderr_) se.resize(S2 * P), sub.stderr_ = se.data();
    Fitter(sub, S).run();
    rq_.n_evals += sub.n_evals;
    for (uint32_t s = 0; s < S; ++s) {
      uint32_t c = S + s;
      uint32_t b = losses[c] < losses[s] || (losses[c] == losses[s] && conv[c] && !conv[s]) ? c : s;
      for (size_t p = 0; p < P; ++p) rq_.params[p * S + s] = params[p * S2 + b];
      for (size_t k = 0; k < steps; ++k) rq_.history[k * S + s] = history[k * S2 + b];
      rq_.losses[s] = losses[b];
      rq_.converged[s] = conv[b];
      if (rq_.status) rq_.status[s] = status[b];
      if (rq_.flags) std::copy_n(flags.begin() + b * P, P, rq_.flags + s * P);
      if (rq_.cov) std::copy_n(cov.begin() + b * P * P, P * P, rq_.cov + s * P * P);
      if (rq_.stderr_) std::copy_n(se.begin() + b * P, P, rq_.stderr_ + s * P);
    }
  }

  void project(std::vector<double>& u) {
    if (!bounded()) return;
    for (size_t p = 0; p < P_; ++p)
      for (uint32_t s = 0; s < S_; ++s) {
        double& v = u[p * S_ + s];
        v = std::min(std::max(v, lo_[p]), hi_[p]);
      }
  }

  // One batched evaluation at internal coordinates u. kLoss: loss_ only; kGrad: loss_ and grad_
  // (d loss / d u) from the MSE mode's seeded sweep (MSE) or from summed Jacobian rows (value);
  // kJac: value_, loss_ and jac_ (d value / d x per lane, external coordinates).
  void evaluate(const std::vector<double>& u, Need need) {
    for (size_t i = 0; i < P_ * S_; ++i) xe_[i] = external(i / S_, u[i]);
    bool jac = need == kJac || (need == kGrad && !mse());
    if (jac && jac_.size() != P_) jac_.assign(P_, std::vector<double>(size_t(S_) * N_));
    for (size_t p = 0; p < P_; ++p) {
      Binding& b = rq_.bindings[rq_.param_binding[p]];
      b.values = xe_.data() + p * S_;
      b.rows = S_;
      if (jac) jac_ptrs_[rq_.param_binding[p]] = jac_[p].data();
    }
    RunRequest run;
    run.bindings = rq_.bindings.data();
    run.nbind = rq_.bindings.size();
    run.S = S_;
    run.N = N_;
    run.grad = need != kLoss;
    run.value_out = value_.data();
    if (jac) {
      run.jac_out = jac_ptrs_.data();
    } else if (mse()) {  // the core reduces to per-start loss and gradient
      run.target = rq_.target;
      run.loss_out = loss_.data();
      run.grad_out = need == kGrad ? grad_ptrs_.data() : nullptr;
    }
    ErrorInfo err;
    if (!rq_.entry(rq_.machine, rq_.dtype, rq_.expanded, rq_.compiled, &run, &err)) {
      Error e(ErrorKind(err.kind), err.message, SrcPos{err.line, err.col}, err.form);
      e.file_ = err.file;
      throw e;
    }
    ++rq_.n_evals;
    if (jac || !mse()) {
      for (uint32_t s = 0; s < S_; ++s) {
        const double* v = value_.data() + size_t(s) * N_;
        double acc = 0.0;
        if (mse()) {
          for (uint32_t n = 0; n < N_; ++n) acc += (v[n] - rq_.target[n]) * (v[n] - rq_.target[n]);
          acc /= N_;
        } else {
          for (uint32_t n = 0; n < N_; ++n) acc += v[n];
        }
        loss_[s] = acc;
      }
    }
    if (need == kGrad && !mse())
      for (size_t p = 0; p < P_; ++p)
        for (uint32_t s = 0; s < S_; ++s) {
          const double* j = jac_[p].data() + size_t(s) * N_;
          double acc = 0.0;
          for (uint32_t n = 0; n < N_; ++n) acc += j[n];
          grad_[p * S_ + s] = acc;
        }
    if (need == kGrad && rq_.positive)  // chain rule: d/du = x d/dx for x = exp(u)
      for (size_t i = 0; i < P_ * S_; ++i)
        if (is_log(i / S_)) grad_[i] *= xe_[i];
  }

  bool finite_grad(uint32_t s) const {
    if (!std::isfinite(loss_[s])) return false;
    for (size_t p = 0; p < P_; ++p)
      if (!std::isfinite(grad_[p * S_ + s])) return false;
    return true;
  }

  void keep_best(uint32_t s, const std::vector<double>& u, double f) {
    if (f < best_[s]) {
      best_[s] = f;
      for (size_t p = 0; p < P_; ++p) best_u_[p * S_ + s] = u[p * S_ + s];
    }
  }

  void record(int k, uint32_t s, double f) {
    if (k >= 0 && k < rq_.steps) rq_.history[size_t(k) * S_ + s] = f;
  }

  // Projected-gradient test shared by Adam and L-BFGS: max |g_j| <= gtol * max(1, |f|), where a
  // component pushing out of the box at an active bound does not count.
  bool gradient_small(uint32_t s, const std::vector<double>& u, const double* g, size_t stride,
                      double f) const {
    double m = 0.0;
    for (size_t p = 0; p < P_; ++p) {
      double gj = g[p * stride], uj = u[p * S_ + s];
      if ((uj <= lo_[p] && gj > 0) || (uj >= hi_[p] && gj < 0)) continue;
      m = std::max(m, std::fabs(gj));
    }
    return m <= rq_.gtol * std::max(1.0, std::fabs(f));
  }

  // ---- Adam -------------------------------------------------------------------------------
  // torch.optim.Adam's exact update (defaults, no weight decay, no amsgrad). Stops a start early
  // only when its projected gradient meets gtol; otherwise it runs all `steps`.
  void adam() {
    std::vector<double> m(P_ * S_, 0.0), v(P_ * S_, 0.0);
    for (int k = 0; k < rq_.steps; ++k) {
      evaluate(u_, kGrad);
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) {
        if (!live(s)) continue;
        if (!finite_grad(s)) {
          retired_[s] = 1;
          continue;
        }
        record(k, s, loss_[s]);
        keep_best(s, u_, loss_[s]);
        if (gradient_small(s, u_, grad_.data() + s, S_, loss_[s])) {
          stop(s, kGtol);
          continue;
        }
        any = true;
      }
      if (!any) return;
      double t = k + 1;
      double bc1 = 1.0 - std::pow(rq_.beta1, t);
      double bc2 = 1.0 - std::pow(rq_.beta2, t);
      double step = rq_.lr / bc1;
      double bc2s = std::sqrt(bc2);
      for (uint32_t s = 0; s < S_; ++s) {
        if (!live(s)) continue;
        for (size_t p = 0; p < P_; ++p) {
          size_t i = p * S_ + s;
          double g = grad_[i];
          m[i] += (g - m[i]) * (1.0 - rq_.beta1);
          v[i] = v[i] * rq_.beta2 + (1.0 - rq_.beta2) * g * g;
          double denom = std::sqrt(v[i]) / bc2s + rq_.eps;
          u_[i] += -step * (m[i] / denom);
        }
      }
      project(u_);
    }
    evaluate(u_, kLoss);
    for (uint32_t s = 0; s < S_; ++s)  // the final point counts if it is the best
      if (live(s) && std::isfinite(loss_[s])) keep_best(s, u_, loss_[s]);
  }

  // ---- L-BFGS -----------------------------------------------------------------------------
  // Memory-10 L-BFGS; every start runs its own strong-Wolfe line search, all trials of all starts
  // in one batched evaluation. Bounds: variables at a bound with the gradient pushing outwards
  // are held, and the line search never leaves the box (its largest step is the distance to it).
  struct LbfgsState {
    std::vector<double> sm, ym, rho, d, g, gt, glo, ulo, al;
    size_t count = 0, head = 0;
    double f = 0, flo = 0;
    bool steepest = false;
    WolfeSearch ls;
  };
  static constexpr size_t kMemory = 10;

  void lbfgs() {
    std::vector<LbfgsState> st(S_);
    std::vector<double> ut = u_;
    evaluate(u_, kGrad);
    for (uint32_t s = 0; s < S_; ++s) {
      LbfgsState& b = st[s];
      b.sm.assign(kMemory * P_, 0.0);
      b.ym.assign(kMemory * P_, 0.0);
      b.rho.assign(kMemory, 0.0);
      b.al.assign(kMemory, 0.0);
      b.d.assign(P_, 0.0);
      b.g.assign(P_, 0.0);
      b.glo.assign(P_, 0.0);
      b.gt.assign(P_, 0.0);
      b.ulo.assign(P_, 0.0);
      if (!finite_grad(s)) {
        retired_[s] = 1;
        continue;
      }
      b.f = loss_[s];
      for (size_t p = 0; p < P_; ++p) b.g[p] = grad_[p * S_ + s];
      record(0, s, b.f);
      keep_best(s, u_, b.f);
      if (gradient_small(s, u_, b.g.data(), 1, b.f)) stop(s, kGtol);
      else begin_search(s, b, ut);
    }
    for (int k = 1;; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) any = any || live(s);
      if (!any) break;
      if (k >= rq_.steps) break;  // budget: the remaining live starts keep kBudget
      for (uint32_t s = 0; s < S_; ++s)
        if (!live(s))
          for (size_t p = 0; p < P_; ++p) ut[p * S_ + s] = u_[p * S_ + s];
      evaluate(ut, kGrad);
      for (uint32_t s = 0; s < S_; ++s)
        if (live(s)) digest(s, st[s], ut);
      for (uint32_t s = 0; s < S_; ++s)
        if (!retired_[s]) record(k, s, st[s].f);
    }
  }

  void two_loop(LbfgsState& b) {
    std::vector<double>& q = b.d;
    for (size_t p = 0; p < P_; ++p) q[p] = b.g[p];
    size_t h = b.count;
    for (size_t k = 0; k < h; ++k) {  // newest to oldest
      size_t i = (b.head + kMemory - 1 - k) % kMemory;
      const double* si = b.sm.data() + i * P_;
      const double* yi = b.ym.data() + i * P_;
      double a = 0;
      for (size_t p = 0; p < P_; ++p) a += si[p] * q[p];
      a *= b.rho[i];
      b.al[i] = a;
      for (size_t p = 0; p < P_; ++p) q[p] -= a * yi[p];
    }
    if (h) {  // initial Hessian gamma I with gamma = s^T y / y^T y of the newest pair
      size_t i = (b.head + kMemory - 1) % kMemory;
      double yy = 0;
      for (size_t p = 0; p < P_; ++p) yy += b.ym[i * P_ + p] * b.ym[i * P_ + p];
      double gamma = 1.0 / (b.rho[i] * yy);
      for (size_t p = 0; p < P_; ++p) q[p] *= gamma;
    }
    for (size_t k = h; k-- > 0;) {  // oldest to newest
      size_t i = (b.head + kMemory - 1 - k) % kMemory;
      const double* si = b.sm.data() + i * P_;
      const double* yi = b.ym.data() + i * P_;
      double be = 0;
      for (size_t p = 0; p < P_; ++p) be += yi[p] * q[p];
      be *= b.rho[i];
      for (size_t p = 0; p < P_; ++p) q[p] += si[p] * (b.al[i] - be);
    }
    for (size_t p = 0; p < P_; ++p) q[p] = -q[p];
  }

  // A new direction from the current point and the first trial of its line search (into ut).
  void begin_search(uint32_t s, LbfgsState& b, std::vector<double>& ut) {
    auto at = [&](size_t p) { return u_[p * S_ + s]; };
    auto held = [&](size_t p, double dp) {  // no room to move along dp
      return (dp < 0 && at(p) <= lo_[p]) || (dp > 0 && at(p) >= hi_[p]);
    };
    double gd = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (b.count && attempt == 0) {
        two_loop(b);
      } else {
        b.count = 0;
        b.head = 0;
        for (size_t p = 0; p < P_; ++p) b.d[p] = -b.g[p];
      }
      gd = 0;
      for (size_t p = 0; p < P_; ++p) {
        if (held(p, b.d[p])) b.d[p] = 0.0;
        gd += b.g[p] * b.d[p];
      }
      b.steepest = b.count == 0;
      if (gd < 0 || b.steepest) break;
    }
    if (!(gd < 0)) {  // no feasible descent direction: a stationary point of the box
      stop(s, kGtol);
      return;
    }
    double amax = kInf, dn = 0;
    for (size_t p = 0; p < P_; ++p) {
      double dp = b.d[p];
      dn += dp * dp;
      if (dp < 0 && std::isfinite(lo_[p])) amax = std::min(amax, (lo_[p] - at(p)) / dp);
      if (dp > 0 && std::isfinite(hi_[p])) amax = std::min(amax, (hi_[p] - at(p)) / dp);
    }
    double a0 = b.count ? 1.0 : std::min(1.0, 1.0 / std::sqrt(dn));
    b.ls.start(b.f, gd, a0, amax);
    trial(s, b, ut);
  }

  void trial(uint32_t s, LbfgsState& b, std::vector<double>& ut) {
    for (size_t p = 0; p < P_; ++p) {
      double v = u_[p * S_ + s] + b.ls.a * b.d[p];
      ut[p * S_ + s] = std::min(std::max(v, lo_[p]), hi_[p]);
    }
  }

  void digest(uint32_t s, LbfgsState& b, std::vector<double>& ut) {
    double ft = loss_[s], dt = 0;
    for (size_t p = 0; p < P_; ++p) dt += grad_[p * S_ + s] * b.d[p];
    WolfeSearch::Result r = b.ls.observe(ft, dt);
    if (b.ls.took_lo) {
      b.flo = ft;
      for (size_t p = 0; p < P_; ++p) {
        b.ulo[p] = ut[p * S_ + s];
        b.glo[p] = grad_[p * S_ + s];
      }
    }
    switch (r) {
      case WolfeSearch::Continue: trial(s, b, ut); return;
      case WolfeSearch::Accept:
        for (size_t p = 0; p < P_; ++p) b.gt[p] = grad_[p * S_ + s];
        take(s, b, ut, ft);
        return;
      case WolfeSearch::AcceptLo:
        for (size_t p = 0; p < P_; ++p) {
          ut[p * S_ + s] = b.ulo[p];
          b.gt[p] = b.glo[p];
        }
        take(s, b, ut, b.flo);
        return;
      case WolfeSearch::Fail:
        if (!b.steepest) {  // the quasi-Newton direction failed: forget and try steepest descent
          b.count = 0;
          begin_search(s, b, ut);
        } else if (b.ls.unresolved() && 10.0 * lm::kEps <= rq_.ftol) {
          stop(s, kFtol);  // no reduction above the loss's rounding error is possible
        } else {
          stop(s, kNoProgress);
        }
        return;
    }
  }

  // Moves start s to the accepted point ut (loss fnew, gradient b.gt) and runs the stop tests.
  void take(uint32_t s, LbfgsState& b, std::vector<double>& ut, double fnew) {
    size_t i = b.head;
    double sy = 0, yy = 0;
    for (size_t p = 0; p < P_; ++p) {
      double sp = ut[p * S_ + s] - u_[p * S_ + s], yp = b.gt[p] - b.g[p];
      b.sm[i * P_ + p] = sp;
      b.ym[i * P_ + p] = yp;
      sy += sp * yp;
      yy += yp * yp;
    }
    if (sy > lm::kEps * yy && std::isfinite(sy) && yy > 0) {  // keep the pair (curvature > 0)
      b.rho[i] = 1.0 / sy;
      b.head = (b.head + 1) % kMemory;
      b.count = std::min(b.count + 1, kMemory);
    }
    double fold = b.f;
    for (size_t p = 0; p < P_; ++p) {
      u_[p * S_ + s] = ut[p * S_ + s];
      b.g[p] = b.gt[p];
    }
    b.f = fnew;
    keep_best(s, u_, fnew);
    if (gradient_small(s, u_, b.g.data(), 1, b.f)) {
      stop(s, kGtol);
    } else if (fold - fnew <= rq_.ftol * std::max(std::fabs(fold), std::fabs(fnew))) {
      stop(s, kFtol);
    } else {
      begin_search(s, b, ut);
    }
  }

  // ---- Levenberg-Marquardt ----------------------------------------------------------------
  // MINPACK's lmder (Moré 1978): a trust region of radius delta in the norm ||D p||, D the
  // running maximum of the Jacobian's column norms; the step solves the damped least-squares
  // problem through a QR of J and an SVD of R D^-1; ftol/xtol/gtol with MINPACK's meanings.
  // Departures: a trial that is not finite, or that makes a parameter's Jacobian column vanish
  // (a saturated exponential: a flat region the fit could not leave), is rejected like a bad
  // step; bounds hold a variable that sits on one and is pushed outwards, and clip the others;
  // a start about to stop (but for gtol) with a parameter its linear model cannot see runs a
  // plateau probe first (start_plateau_probe). An unscaled start (scaling "none", or the second
  // lane of "both", run_both) keeps D = 1 (but for blamed parameters, see judge) and shrinks
  // its radius after a rejected step to 1/4 of the step, as scipy's trf: the two regions cross
  // ridges differently, and which side of a ridge a shrunk step lands on is luck. Measured on
  // bench/fit_quality.py's 51 fits: scaled 41, unscaled 42 (the 41 and Beale from 100 x0),
  // both 42; but the unscaled region with a shrink to 0.2 / 0.3 / 0.5 of the step solves 40 /
  // 38 / 38 (losing Meyer 10x or 100x, Kowalik-Osborne 100x, Rosenbrock 100x), so the default
  // keeps both lanes, which never loses a fit that MINPACK's region solves. Geodesic
  // acceleration (Transtrum-Sethna 2012, r_vv by a finite difference at x + 0.1 v, accepted
  // when 2|a|/|v| <= 0.75) was tried and measured there: 39 of 51 (37 when only damped steps
  // are accelerated), Beale 100 x0 not solved, 60% more evaluations; it is not used.
  // At most this many trials per plateau probe, and this many probes per start (see below).
  static constexpr int kPlateauTrials = 8, kPlateauProbes = 4;
  struct LmState {
    lm::Factor F;
    std::vector<double> D, z, J, r, cn, col0, acn, A, p, dp, w;  // cn: J's column norms
    std::vector<double> blind;  // plateau probe: descent direction of each blind parameter, or 0
    std::vector<uint8_t> held;
    double delta = 0, par = 0, fnorm = 0, xnorm = 0, gnorm = 0, pnorm = 0, prered = 0,
           dirder = 0;
    int probe = 0, probes_left = kPlateauProbes;  // probe: the current trial's index (1..), or 0
    int8_t why = kBudget;  // the stop reason that a plateau probe holds back
    bool factored = false, first = true, scaled = false;
    bool unscaled = false;  // the lane without column scaling (see lm())
  };

  double residual_norm(uint32_t s, double* r) const {
    const double* v = value_.data() + size_t(s) * N_;
    for (uint32_t n = 0; n < N_; ++n) r[n] = v[n] - rq_.target[n];
    return lm::enorm(r, N_);
  }

  // Copies start s's Jacobian (internal coordinates, column-major N x P) from jac_ and its
  // column norms into cn; false if any entry is not finite.
  bool copy_jacobian(uint32_t s, const std::vector<double>& u, double* J, double* cn) const {
    bool ok = true;
    for (size_t p = 0; p < P_; ++p) {
      const double* src = jac_[p].data() + size_t(s) * N_;
      double* dst = J + p * N_;
      if (is_log(p)) {
        double scale = std::exp(u[p * S_ + s]);
        for (uint32_t n = 0; n < N_; ++n) dst[n] = src[n] * scale;
      } else {
        std::copy(src, src + N_, dst);
      }
      cn[p] = lm::enorm(dst, N_);
      ok = ok && std::isfinite(cn[p]);
    }
    return ok;
  }

  void lm() {
    const double radius0 = 100.0;  // MINPACK's initial radius: factor * ||D x0||
    std::vector<LmState> st(S_);
    std::vector<double> ut = u_, rt(N_), Jt(size_t(N_) * P_), cnt(P_);
    evaluate(u_, kJac);
    for (uint32_t s = 0; s < S_; ++s) {
      LmState& m = st[s];
      m.F.resize(P_);
      m.unscaled = s >= unscaled_from_;
      m.D.assign(P_, 1.0);
      m.z.assign(P_, 0.0);
      m.p.assign(P_, 0.0);
      m.dp.assign(P_, 0.0);
      m.w.assign(P_, 0.0);
      m.acn.assign(P_, 0.0);
      m.held.assign(P_, 0);
      m.blind.assign(P_, 0.0);
      m.r.assign(N_, 0.0);
      m.J.assign(size_t(N_) * P_, 0.0);
      m.cn.assign(P_, 0.0);
      m.fnorm = residual_norm(s, m.r.data());
      if (!std::isfinite(m.fnorm) || !copy_jacobian(s, u_, m.J.data(), m.cn.data())) {
        retired_[s] = 1;
        continue;
      }
      m.col0 = m.cn;
      record(0, s, loss_[s]);
      keep_best(s, u_, loss_[s]);
    }
    for (int k = 1;; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) {
        if (!live(s)) continue;
        LmState& m = st[s];
        if (m.probe) {
          probe_trial(s, m, ut);
          any = true;
          continue;
        }
        if (!m.factored) refactor(s, m, radius0);
        if (!live(s)) continue;
        propose(s, m, ut);
        any = true;
      }
      if (!any || k >= rq_.steps) break;  // budget: the remaining live starts keep kBudget
      evaluate(ut, kJac);
      for (uint32_t s = 0; s < S_; ++s)
        if (live(s) && st[s].probe) probe_judge(s, st[s], ut, rt, Jt, cnt);
        else if (live(s)) judge(s, st[s], ut, rt, Jt, cnt);
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s]) continue;
        LmState& m = st[s];
        double f = m.fnorm / std::sqrt(double(N_));
        record(k, s, f * f);
      }
    }
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) continue;
      LmState& m = st[s];
      // a column that vanished during the fit; or every column zero while the residuals are not
      // (started where the model no longer depends on any parameter: a zero gradient, no minimum)
      bool flat = m.fnorm > 0.0;
      for (size_t p = 0; p < P_; ++p) flat = flat && m.cn[p] == 0.0;
      for (size_t p = 0; p < P_; ++p) {
        if (m.cn[p] == 0.0 && (m.col0[p] > 0.0 || flat)) {
          flags_[p * S_ + s] |= 2;
          if (status_[s] > 0) status_[s] = kDegenerate;
        }
      }
      if (rq_.uncertainty) {
        // covariance in external coordinates: undo the chain rule of positive parameters
        for (size_t p = 0; p < P_; ++p)
          if (is_log(p)) {
            double x = std::exp(u_[p * S_ + s]);
            for (uint32_t n = 0; n < N_; ++n) m.J[p * N_ + n] /= x;
          }
        write_covariance(s, m.J.data(), m.fnorm);
      }
    }
  }

  // QR and SVD at start s's current point, the gradient test, and the column scaling.
  void refactor(uint32_t s, LmState& m, double radius0) {
    m.A = m.J;
    for (size_t p = 0; p < P_; ++p) {
      m.acn[p] = m.cn[p];
      m.held[p] = 0;
      if (!bounded()) continue;
      double up = u_[p * S_ + s], g = 0;
      for (uint32_t n = 0; n < N_; ++n) g += m.J[p * N_ + n] * m.r[n];
      // held: on a bound, with the descent direction -g pointing out of the box
      m.held[p] = (up <= lo_[p] && g > 0) || (up >= hi_[p] && g < 0);
      if (m.held[p]) {
        std::fill(m.A.begin() + p * N_, m.A.begin() + (p + 1) * N_, 0.0);
        m.acn[p] = 0.0;
      }
    }
    m.F.qr(m.A.data(), N_, m.r.data());
    m.gnorm = 0.0;
    if (m.fnorm != 0.0)
      for (size_t j = 0; j < P_; ++j) {
        if (m.acn[j] == 0.0) continue;
        double sum = 0.0;
        for (size_t i = 0; i <= j; ++i) sum += m.F.R[i * P_ + j] * (m.F.qtf[i] / m.fnorm);
        m.gnorm = std::max(m.gnorm, std::fabs(sum / m.acn[j]));
      }
    if (!m.scaled) {
      // MINPACK's start: D from the column norms, radius factor * ||D x0|| (factor when x0 = 0);
      // here a zero component counts as 1, so that a start such as (0, 100) does not get a
      // radius set by the one parameter that happens to be non-zero
      m.scaled = true;
      for (size_t p = 0; p < P_; ++p) {
        m.D[p] = m.acn[p] > 0 && !m.unscaled ? m.acn[p] : 1.0;
        double up = u_[p * S_ + s];
        m.w[p] = m.D[p] * (up != 0.0 ? up : 1.0);
      }
      m.delta = radius0 * lm::enorm(m.w.data(), P_);
      m.xnorm = scaled_norm(s, m, u_);
    }
    if (m.gnorm <= rq_.gtol) {
      stop(s, kGtol);
      return;
    }
    if (!m.unscaled)
      for (size_t p = 0; p < P_; ++p) m.D[p] = std::max(m.D[p], m.acn[p]);
    m.F.svd(m.D.data());
    m.factored = true;
  }

  double scaled_norm(uint32_t s, LmState& m, const std::vector<double>& u) const {
    for (size_t p = 0; p < P_; ++p) m.w[p] = m.D[p] * u[p * S_ + s];
    return lm::enorm(m.w.data(), P_);
  }

  // The step for the current radius: trial point into ut, with its predicted reduction.
  void propose(uint32_t s, LmState& m, std::vector<double>& ut) {
    m.par = m.F.lmpar(m.delta, m.par, N_, m.z.data());
    bool clipped = false;
    std::vector<double>& p = m.p;
    std::vector<double>& dp = m.dp;
    std::vector<double>& w = m.w;
    for (size_t j = 0; j < P_; ++j) {
      double acc = 0.0;  // D p = V z
      for (size_t i = 0; i < P_; ++i) acc += m.F.v(j, i) * m.z[i];
      double step = m.held[j] ? 0.0 : acc / m.D[j];
      double u0 = u_[j * S_ + s], v = std::min(std::max(u0 + step, lo_[j]), hi_[j]);
      clipped = clipped || v != u0 + step;
      ut[j * S_ + s] = v;
      p[j] = v - u0;
      dp[j] = m.D[j] * p[j];
    }
    m.pnorm = lm::enorm(dp.data(), P_);
    if (m.first) m.delta = std::min(m.delta, m.pnorm);
    // R p / fnorm, for the predicted reduction of the linear model
    for (size_t i = 0; i < P_; ++i) {
      double acc = 0.0;
      for (size_t j = i; j < P_; ++j) acc += m.F.R[i * P_ + j] * p[j];
      w[i] = acc / m.fnorm;
    }
    double t1 = lm::enorm(w.data(), P_);
    if (!clipped && !std::any_of(m.held.begin(), m.held.end(), [](uint8_t h) { return h; })) {
      double t2 = std::sqrt(m.par) * m.pnorm / m.fnorm;
      m.prered = t1 * t1 + 2.0 * t2 * t2;
      m.dirder = -(t1 * t1 + t2 * t2);
    } else {  // a clipped step: the model's reduction along the step actually taken
      double dot = 0.0;
      for (size_t i = 0; i < P_; ++i) dot += w[i] * (m.F.qtf[i] / m.fnorm);
      m.dirder = dot;
      m.prered = -(2.0 * dot + t1 * t1);
    }
  }

  // The ratio test of the trial at ut: accept or reject, update the radius, run the stop tests.
  void judge(uint32_t s, LmState& m, std::vector<double>& ut, std::vector<double>& rt,
             std::vector<double>& Jt, std::vector<double>& cnt) {
    double fnorm1 = residual_norm(s, rt.data());
    bool bad = !std::isfinite(fnorm1) || !copy_jacobian(s, ut, Jt.data(), cnt.data());
    // A step that took a parameter where the model no longer depends on it (its column
    // vanished), or that made the model non-finite while moving one parameter by more than its
    // own magnitude, is blamed on that parameter: its scale D_j is raised so that it may move a
    // tenth as far (and at most by its magnitude) next time, leaving the radius to the others.
    bool blamed = false;
    auto blame = [&](size_t p) {
      double allowed = std::min(0.1 * std::fabs(m.p[p]), std::max(std::fabs(u_[p * S_ + s]), 1.0));
      m.D[p] = std::max(m.D[p], m.delta / allowed);
      blamed = true;
    };
    if (!bad) {
      for (size_t p = 0; p < P_; ++p)
        if (!m.held[p] && m.acn[p] > 0 && cnt[p] < 1e-12 * m.acn[p] && m.p[p] != 0.0) blame(p);
    } else {
      size_t worst = P_;
      double most = 1.0;
      for (size_t p = 0; p < P_; ++p) {
        double rel = std::fabs(m.p[p]) / std::max(std::fabs(u_[p * S_ + s]), 1.0);
        if (rel > most) {
          most = rel;
          worst = p;
        }
      }
      if (worst < P_) blame(worst);
    }
    if (blamed) {
      m.F.svd(m.D.data());
      m.xnorm = scaled_norm(s, m, u_);
      m.par = 0.0;
      return;
    }
    double actred = -1.0;
    if (!bad && 0.1 * fnorm1 < m.fnorm) actred = 1.0 - (fnorm1 / m.fnorm) * (fnorm1 / m.fnorm);
    double ratio = m.prered != 0.0 ? actred / m.prered : 0.0;
    if (bad) ratio = 0.0;
    if (ratio <= 0.25) {
      double temp = actred >= 0 ? 0.5 : 0.5 * m.dirder / (m.dirder + 0.5 * actred);
      if (bad || 0.1 * fnorm1 >= m.fnorm || !(temp >= 0.1)) temp = 0.1;
      m.delta = temp * std::min(m.delta, m.pnorm / 0.1);
      if (m.unscaled) {  // scipy trf's rule: a quarter of the rejected step
        temp = 0.25;
        m.delta = temp * m.pnorm;
      }
      m.par /= temp;
    } else if (m.par == 0.0 || ratio >= 0.75) {
      m.delta = m.pnorm / 0.5;
      m.par *= 0.5;
    }
    if (ratio >= 1e-4) {
      for (size_t p = 0; p < P_; ++p) u_[p * S_ + s] = ut[p * S_ + s];
      m.r.swap(rt);
      m.J.swap(Jt);
      m.cn.swap(cnt);
      m.fnorm = fnorm1;
      m.xnorm = scaled_norm(s, m, u_);
      m.factored = false;
      m.first = false;
      keep_best(s, u_, loss_[s]);
    }
    int8_t why = 0;
    if (std::fabs(actred) <= rq_.ftol && m.prered <= rq_.ftol && 0.5 * ratio <= 1.0) why = kFtol;
    if (m.delta <= rq_.tol * m.xnorm) why = why == kFtol ? kFtolXtol : kXtol;
    if (why == kXtol && bad) why = kNonFinite;
    if (why == kFtol && !false_ftol_check(s, m)) why = kNoProgress;
    if (!why && ((std::fabs(actred) <= lm::kEps && m.prered <= lm::kEps && 0.5 * ratio <= 1.0) ||
                 m.delta <= lm::kEps * m.xnorm || m.gnorm <= lm::kEps))
      why = kNoProgress;
    if (why && why != kGtol && start_plateau_probe(s, m, why)) return;
    if (why) stop(s, why);
  }

  // Plateau probe. The trust region's linear model cannot see a parameter whose Jacobian column
  // is below the rounding level of the others (a saturated exponential: exp(-t x2) at x2 = 1000
  // is 1e-44 of the other columns), so a fit that collapsed its trust region there may sit on a
  // plateau, not at a minimum: the loss still falls along that parameter, only too slowly for
  // the linear model (Moré-Garbow-Hillstrom box3d from 100 x0 stalls at (0.61, 1000, 1.32), and
  // its loss falls monotonically to 0 as x2 goes from 1000 to 10; the trust region either
  // collapses, "no progress", or meets ftol/xtol on the parameters it can see). Before such a
  // start stops for any reason but gtol (which the blind columns' cosines must meet too), every
  // blind parameter whose gradient still has a sign is moved along its descent direction by
  // growing fractions of its magnitude (1/2, 3/4, 7/8, ... of the way toward zero, or 1, 2, 4,
  // ... times it away from zero); the first trial that lowers the loss and where a blind column
  // is above the rounding level again (off the plateau, not further onto it) is taken, and the
  // trust region restarts there as at a new start. No such trial: the start stops with the
  // reason it had (a parameter's best value may lie at infinity: Bard's local minimum with x2,
  // x3 -> -inf, or b in a + exp(-b x) fitted to a constant).
  bool start_plateau_probe(uint32_t s, LmState& m, int8_t why) {
    if (m.probes_left <= 0) return false;
    double big = 0.0;
    for (size_t p = 0; p < P_; ++p) big = std::max(big, m.cn[p]);
    bool any = false;
    for (size_t p = 0; p < P_; ++p) {
      m.blind[p] = 0.0;
      if (m.cn[p] > lm::kEps * big) continue;
      double g = 0.0;  // d (|r|^2 / 2) / d u_p, by the summands' signs only if they underflow
      for (uint32_t n = 0; n < N_; ++n) g += m.J[p * N_ + n] * m.r[n];
      if (g == 0.0 || !std::isfinite(g)) continue;
      double up = u_[p * S_ + s];
      if ((g > 0 && up <= lo_[p]) || (g < 0 && up >= hi_[p])) continue;  // held by a bound
      m.blind[p] = g > 0 ? -1.0 : 1.0;
      any = true;
    }
    if (!any) return false;
    --m.probes_left;
    m.probe = 1;
    m.why = why;
    return true;
  }

  void probe_trial(uint32_t s, LmState& m, std::vector<double>& ut) {
    for (size_t p = 0; p < P_; ++p) {
      double up = u_[p * S_ + s], v = up;
      if (m.blind[p] != 0.0) {
        double mag = std::max(std::fabs(up), 1.0);
        bool toward_zero = m.blind[p] * up < 0.0;
        double frac = toward_zero ? 1.0 - std::ldexp(1.0, -m.probe) : std::ldexp(1.0, m.probe - 1);
        v = std::min(std::max(up + m.blind[p] * frac * mag, lo_[p]), hi_[p]);
      }
      ut[p * S_ + s] = v;
    }
  }

  void probe_judge(uint32_t s, LmState& m, std::vector<double>& ut, std::vector<double>& rt,
                   std::vector<double>& Jt, std::vector<double>& cnt) {
    double fnorm1 = residual_norm(s, rt.data());
    bool ok = std::isfinite(fnorm1) && copy_jacobian(s, ut, Jt.data(), cnt.data());
    double big = 0.0;
    for (size_t p = 0; p < P_; ++p) big = std::max(big, cnt[p]);
    bool seen = false;  // a blind parameter's column is above the others' rounding level again
    for (size_t p = 0; p < P_; ++p) seen = seen || (m.blind[p] != 0.0 && cnt[p] > lm::kEps * big);
    if (ok && seen && fnorm1 < m.fnorm) {  // off the plateau: restart the trust region here
      for (size_t p = 0; p < P_; ++p) u_[p * S_ + s] = ut[p * S_ + s];
      m.r.swap(rt);
      m.J.swap(Jt);
      m.cn.swap(cnt);
      m.fnorm = fnorm1;
      keep_best(s, u_, loss_[s]);
      std::fill(m.D.begin(), m.D.end(), 1.0);
      m.par = 0.0;
      m.probe = 0;
      m.factored = false;
      m.first = true;
      m.scaled = false;
      return;
    }
    if (++m.probe > kPlateauTrials) {
      m.probe = 0;
      stop(s, m.why);
    }
  }

  // An ftol stop is a convergence only where the residuals are nearly orthogonal to every
  // Jacobian column (MINPACK's gnorm, here at most 1e-2): a trust region that collapsed on a
  // badly nonlinear model also makes the relative reductions small, far from any minimum.
  bool false_ftol_check(uint32_t s, LmState& m) {
    if (!m.factored) {
      refactor(s, m, 0.0);  // (the radius is set by now)
      if (done_[s]) return true;  // gtol met at the point
    }
    return m.gnorm <= 1e-2;
  }

  void write_covariance(uint32_t s, double* J, double fnorm) {
    if (!rq_.cov && !rq_.stderr_) return;
    uncertainty_done_ = true;
    std::vector<double> cov(P_ * P_), se(P_);
    std::vector<unsigned char> fl(P_);
    lm::covariance(J, N_, P_, fnorm * fnorm, cov.data(), se.data(), fl.data());
    for (size_t p = 0; p < P_; ++p) flags_[p * S_ + s] |= fl[p];
    if (rq_.cov) std::copy(cov.begin(), cov.end(), rq_.cov + size_t(s) * P_ * P_);
    if (rq_.stderr_) std::copy(se.begin(), se.end(), rq_.stderr_ + size_t(s) * P_);
  }

  // Covariance at each start's best point (Adam, L-BFGS): one batched Jacobian evaluation.
  void uncertainty_at_best() {
    if (!rq_.cov && !rq_.stderr_) return;
    evaluate(best_u_, kJac);
    std::vector<double> J(size_t(N_) * P_), r(N_);
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) continue;
      for (size_t p = 0; p < P_; ++p)
        std::copy(jac_[p].begin() + size_t(s) * N_, jac_[p].begin() + size_t(s + 1) * N_,
                  J.begin() + p * N_);
      write_covariance(s, J.data(), residual_norm(s, r.data()));
    }
  }
};

inline bool fit_guarded(FitRequest* rq, ErrorInfo* err) {
  return guarded(*err, [&] { Fitter(*rq).run(); });
}

}  // namespace ndvm

// The shared per-start driver of the native calibrations (FitDriver): internal coordinates (a
// parameter flagged positive is optimized as its logarithm), bounds, one batched evaluation of all
// starts (S*N lanes, through the client's entry point), each start's best point, history and stop
// reason, and the covariance at the end. An optimizer (adam.hpp, lbfgs.hpp, lm.hpp) derives from
// it and implements optimize(); starts are independent, and a start that stops is frozen.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fit/lsq.hpp"
#include "fit/request.hpp"

namespace ndvm {

// A vector's elements kept between fits: cleared and released when they take more than
// kKeepBytes, so that one huge fit does not pin its memory for the thread's life; not while
// keeping_all() is positive (a fit run in groups of starts, fit.hpp, trims once after its last).
constexpr size_t kKeepBytes = size_t(64) << 20;
inline int& keeping_all() {
  thread_local int depth = 0;
  return depth;
}
template <class V>
void keep_small(V& v, size_t bytes) {
  if (bytes > kKeepBytes && keeping_all() == 0) v = V();
}

// The driver's buffers, one set per thread, kept between fits: a worker that runs fit after fit
// allocates nothing once they have grown to its largest fit (FitDriver binds references to them).
struct FitScratch {
  std::vector<double> value, u, xe, best_u, best, loss, grad, lo, hi;
  std::vector<std::vector<double>> jac;
  std::vector<double*> jac_ptrs, grad_ptrs;
  std::vector<uint8_t> retired, done, flags;
  std::vector<int8_t> status;
  std::vector<double> J, r, cov, se;  // covariance at the best point
  std::vector<unsigned char> cov_flags;
  std::vector<uint32_t> evaluated;  // the starts of the last batched evaluation

  static FitScratch& here() {
    thread_local FitScratch s;
    return s;
  }
  size_t bytes() const {
    size_t n = value.capacity() + J.capacity();
    for (const auto& c : jac) n += c.capacity();
    return n * sizeof(double);
  }
};

class FitDriver {
 public:
  // (the thread's buffers released when this fit made them huge, however it ended)
  virtual ~FitDriver() { keep_small(sc_, sc_.bytes()); }

  // Runs the optimizer from rq.params and writes every output the request asks for.
  void run() {
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
    for (size_t k = 0; k < size_t(rq_.budget) * S_; ++k) rq_.history[k] = std::nan("");
    packing_ = true;  // (the iterations evaluate the live starts alone)
    optimize();
    packing_ = false;
    if (rq_.optimizer != Optimizer::LM && rq_.uncertainty && mse()) uncertainty_at_best();
    for (size_t i = 0; i < P_ * S_; ++i) rq_.params[i] = external(i / S_, best_u_[i]);
    if (bounded())  // flag 4: the parameter ends on a bound of its box (a constrained optimum)
      for (size_t i = 0; i < P_ * S_; ++i)
        if (best_u_[i] <= lo_[i / S_] || best_u_[i] >= hi_[i / S_]) flags_[i] |= 4;
    for (uint32_t s = 0; s < S_; ++s) {
      // (a start retired, or whose loss was never finite: a sum of squares of finite residuals
      // near 1e160 overflows, and LM's norms, which do not, took its frozen steps for xtol)
      if (retired_[s] || !std::isfinite(best_[s])) status_[s] = kNonFinite;
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

 protected:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  enum Need { kLoss, kGrad, kJac };

  // LM: starts from `unscaled_from` on run without column scaling
  FitDriver(FitRequest& rq, uint32_t unscaled_from)
      : rq_(rq), S_(rq.S), N_(rq.N), P_(rq.param_binding.size()), unscaled_from_(unscaled_from),
        sc_(FitScratch::here()), value_(sc_.value), u_(sc_.u), xe_(sc_.xe), best_u_(sc_.best_u),
        best_(sc_.best), loss_(sc_.loss), grad_(sc_.grad), lo_(sc_.lo), hi_(sc_.hi),
        jac_(sc_.jac), jac_ptrs_(sc_.jac_ptrs), grad_ptrs_(sc_.grad_ptrs),
        retired_(sc_.retired), done_(sc_.done), flags_(sc_.flags), status_(sc_.status) {}

  // The optimizer's iterations, from u_ (projected) with every start live; it keeps best_u_.
  virtual void optimize() = 0;

  FitRequest& rq_;
  uint32_t S_, N_;
  size_t P_;
  uint32_t unscaled_from_;
  FitScratch& sc_;  // this thread's buffers (one fit at a time runs on a thread)
  std::vector<double>&value_, &u_, &xe_, &best_u_, &best_, &loss_, &grad_, &lo_, &hi_;
  std::vector<std::vector<double>>& jac_;  // [P][S*N] (of a longer list), filled by kJac
  std::vector<double*>&jac_ptrs_, &grad_ptrs_;
  std::vector<uint8_t>&retired_, &done_, &flags_;
  std::vector<int8_t>& status_;
  bool packing_ = false;  // evaluate() packs the live starts (while optimize() runs)
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
  // kJac: value_, loss_ and jac_ (d value / d x per lane, external coordinates). While the
  // optimizer iterates (packing_), only the live starts are evaluated: packed as the batch's
  // first starts, their outputs then moved to their own places (a start that stopped is never
  // read again; 64 starts of which 2 run on to the budget were 64 starts' work at every step).
  void evaluate(const std::vector<double>& u, Need need) {
    std::vector<uint32_t>& of = sc_.evaluated;  // the starts evaluated, in order
    of.clear();
    for (uint32_t s = 0; s < S_; ++s)
      if (!packing_ || live(s)) of.push_back(s);
    if (of.empty()) return;  // (no start left to evaluate)
    const uint32_t S = uint32_t(of.size());
    for (size_t p = 0; p < P_; ++p)
      for (uint32_t j = 0; j < S; ++j) xe_[p * S + j] = external(p, u[p * S_ + of[j]]);
    bool jac = need == kJac || (need == kGrad && !mse());
    if (jac) {
      if (jac_.size() < P_) jac_.resize(P_);
      for (size_t p = 0; p < P_; ++p) jac_[p].resize(size_t(S_) * N_);
    }
    for (size_t p = 0; p < P_; ++p) {
      Binding& b = rq_.bindings[rq_.param_binding[p]];
      b.values = xe_.data() + p * S;
      b.rows = S;
      if (jac) jac_ptrs_[rq_.param_binding[p]] = jac_[p].data();
    }
    RunRequest run;
    run.bindings = rq_.bindings.data();
    run.nbind = rq_.bindings.size();
    run.S = S;
    run.N = N_;
    run.grad = need != kLoss;
    run.value_out = value_.data();
    bool reduced = false;  // loss_ (and grad_) reduced by the core
    if (jac) {
      run.jac_out = jac_ptrs_.data();
    } else if (mse()) {  // the core reduces to per-start loss and gradient
      run.target = rq_.target;
      run.loss_out = loss_.data();
      run.grad_out = need == kGrad ? grad_ptrs_.data() : nullptr;
      reduced = true;
    }
    ErrorInfo err;
    if (!rq_.entry(rq_.machine, rq_.dtype, rq_.expanded, rq_.compiled, &run, &err)) {
      Error e(ErrorKind(err.kind), err.message, SrcPos{err.line, err.col}, err.form);
      e.file_ = err.file;
      throw e;
    }
    ++rq_.n_evals;
    if (S < S_) unpack(S, jac, reduced, run.grad_out != nullptr);
    if (jac || !mse()) {
      for (uint32_t s : of) {
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
        for (uint32_t s : of) {
          const double* j = jac_[p].data() + size_t(s) * N_;
          double acc = 0.0;
          for (uint32_t n = 0; n < N_; ++n) acc += j[n];
          grad_[p * S_ + s] = acc;
        }
    if (need == kGrad && rq_.positive)  // chain rule: d/du = x d/dx for x = exp(u)
      for (size_t p = 0; p < P_; ++p)
        if (is_log(p))
          for (uint32_t s : of) grad_[p * S_ + s] *= external(p, u[p * S_ + s]);
  }

  // Moves the outputs of the S packed starts (the first S of each buffer) to their starts' own
  // places, last first (a start's place is never before its packed one, so none is overwritten
  // before it has moved).
  void unpack(uint32_t S, bool jac, bool reduced, bool grad) {
    const std::vector<uint32_t>& of = sc_.evaluated;
    for (uint32_t j = S; j-- > 0;) {
      uint32_t s = of[j];
      if (s == j) continue;
      std::copy_n(value_.begin() + size_t(j) * N_, N_, value_.begin() + size_t(s) * N_);
      if (jac)
        for (size_t p = 0; p < P_; ++p)
          std::copy_n(jac_[p].begin() + size_t(j) * N_, N_, jac_[p].begin() + size_t(s) * N_);
      if (reduced) loss_[s] = loss_[j];
      if (grad)
        for (size_t p = 0; p < P_; ++p) grad_[p * S_ + s] = grad_[p * S_ + j];
    }
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
    if (k >= 0 && k < rq_.budget) rq_.history[size_t(k) * S_ + s] = f;
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
  double residual_norm(uint32_t s, double* r) const {
    const double* v = value_.data() + size_t(s) * N_;
    for (uint32_t n = 0; n < N_; ++n) r[n] = v[n] - rq_.target[n];
    return lm::enorm(r, N_);
  }

  // Copies start s's Jacobian (internal coordinates, column-major N x P) from jac_ and its

  void write_covariance(uint32_t s, double* J, double fnorm) {
    if (!rq_.cov && !rq_.stderr_) return;
    uncertainty_done_ = true;
    std::vector<double>&cov = sc_.cov, &se = sc_.se;
    std::vector<unsigned char>& fl = sc_.cov_flags;
    cov.resize(P_ * P_);
    se.resize(P_);
    fl.resize(P_);
    lm::covariance(J, N_, P_, fnorm * fnorm, cov.data(), se.data(), fl.data());
    for (size_t p = 0; p < P_; ++p) flags_[p * S_ + s] |= fl[p];
    if (rq_.cov) std::copy(cov.begin(), cov.end(), rq_.cov + size_t(s) * P_ * P_);
    if (rq_.stderr_) std::copy(se.begin(), se.end(), rq_.stderr_ + size_t(s) * P_);
  }

  // Covariance at each start's best point (Adam, L-BFGS): one batched Jacobian evaluation.
  void uncertainty_at_best() {
    if (!rq_.cov && !rq_.stderr_) return;
    evaluate(best_u_, kJac);
    std::vector<double>&J = sc_.J, &r = sc_.r;
    J.resize(size_t(N_) * P_);
    r.resize(N_);
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) continue;
      for (size_t p = 0; p < P_; ++p)
        std::copy(jac_[p].begin() + size_t(s) * N_, jac_[p].begin() + size_t(s + 1) * N_,
                  J.begin() + p * N_);
      write_covariance(s, J.data(), residual_norm(s, r.data()));
    }
  }
};

}  // namespace ndvm

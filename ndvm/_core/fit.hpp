// Native calibration: Adam, L-BFGS and Levenberg-Marquardt over S starts at once. Every step is
// one batched evaluation of the program (S*N lanes, through the client's entry point) plus a few
// operations per start in C++ — no Python per step. Starts are independent: each keeps its own
// optimizer state, and a start whose loss becomes non-finite is retired (frozen) without
// disturbing the others.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "client_api.hpp"

namespace ndvm {

enum class Optimizer : int { Adam = 0, LBFGS = 1, LM = 2 };

struct FitRequest {
  ClientEntry entry = nullptr;
  void* machine = nullptr;
  int dtype = 0;
  const void* expanded = nullptr;
  const void* compiled = nullptr;
  std::vector<Binding> bindings;    // one per free name; parameters point into `params`
  std::vector<int> param_binding;   // for each fitted parameter, its index in `bindings`
  uint32_t S = 1, N = 1;
  const double* target = nullptr;   // [N]
  Optimizer optimizer = Optimizer::Adam;
  int steps = 50;
  double lr = 0.05, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double tol = 1e-12;               // LM / L-BFGS: stop a start when its step is this small
  const double* lower = nullptr;    // [P] or null
  const double* upper = nullptr;
  // in: initial values [P][S]; out: the best parameters seen per start
  double* params = nullptr;
  double* losses = nullptr;         // out [S]: best loss per start
  double* history = nullptr;        // out [steps][S]: loss at each step (NaN once retired)
  uint8_t* converged = nullptr;     // out [S]
  int64_t n_evals = 0;              // out
};

class Fitter {
 public:
  explicit Fitter(FitRequest& rq) : rq_(rq), S_(rq.S), N_(rq.N), P_(rq.param_binding.size()) {}

  void run() {
    size_t L = size_t(S_) * N_;
    value_.resize(L);
    jac_.assign(P_, std::vector<double>(L));
    jac_ptrs_.assign(rq_.bindings.size(), nullptr);
    x_.assign(P_ * S_, 0.0);
    for (size_t p = 0; p < P_; ++p)
      for (uint32_t s = 0; s < S_; ++s) x_[p * S_ + s] = rq_.params[p * S_ + s];
    project(x_);
    best_x_ = x_;
    best_.assign(S_, std::numeric_limits<double>::infinity());
    retired_.assign(S_, 0);
    done_.assign(S_, 0);
    for (uint32_t s = 0; s < S_; ++s) rq_.converged[s] = 0;
    for (size_t k = 0; k < size_t(rq_.steps) * S_; ++k) rq_.history[k] = std::nan("");
    switch (rq_.optimizer) {
      case Optimizer::Adam: adam(); break;
      case Optimizer::LBFGS: lbfgs(); break;
      case Optimizer::LM: lm(); break;
    }
    for (size_t p = 0; p < P_; ++p)
      for (uint32_t s = 0; s < S_; ++s) rq_.params[p * S_ + s] = best_x_[p * S_ + s];
    for (uint32_t s = 0; s < S_; ++s) {
      rq_.losses[s] = best_[s];
      rq_.converged[s] = done_[s];
    }
  }

 private:
  FitRequest& rq_;
  uint32_t S_, N_;
  size_t P_;
  std::vector<double> value_, x_, best_x_, best_, loss_, grad_;
  std::vector<std::vector<double>> jac_;
  std::vector<double*> jac_ptrs_;
  std::vector<uint8_t> retired_, done_;

  double& at(std::vector<double>& v, size_t p, uint32_t s) { return v[p * S_ + s]; }

  void project(std::vector<double>& x) {
    if (!rq_.lower && !rq_.upper) return;
    for (size_t p = 0; p < P_; ++p)
      for (uint32_t s = 0; s < S_; ++s) {
        double& v = x[p * S_ + s];
        if (rq_.lower && v < rq_.lower[p]) v = rq_.lower[p];
        if (rq_.upper && v > rq_.upper[p]) v = rq_.upper[p];
      }
  }

  // One batched evaluation at parameters x: per-start MSE loss and gradient (and the per-lane
  // Jacobian in jac_). Retires starts whose loss is not finite.
  void evaluate(const std::vector<double>& x, bool need_jac = true) {
    for (size_t p = 0; p < P_; ++p) {
      Binding& b = rq_.bindings[rq_.param_binding[p]];
      b.values = x.data() + p * S_;
      b.rows = S_;
      jac_ptrs_[rq_.param_binding[p]] = jac_[p].data();
    }
    RunRequest run;
    run.bindings = rq_.bindings.data();
    run.nbind = rq_.bindings.size();
    run.S = S_;
    run.N = N_;
    run.grad = need_jac;
    run.value_out = value_.data();
    run.jac_out = jac_ptrs_.data();
    ErrorInfo err;
    if (!rq_.entry(rq_.machine, rq_.dtype, rq_.expanded, rq_.compiled, &run, &err)) {
      Error e(ErrorKind(err.kind), err.message, SrcPos{err.line, err.col}, err.form);
      e.file_ = err.file;
      throw e;
    }
    ++rq_.n_evals;
    loss_.assign(S_, 0.0);
    grad_.assign(P_ * S_, 0.0);
    for (uint32_t s = 0; s < S_; ++s) {
      double acc = 0.0;
      for (uint32_t n = 0; n < N_; ++n) {
        double r = value_[size_t(s) * N_ + n] - rq_.target[n];
        acc += r * r;
      }
      loss_[s] = acc / N_;
      if (!need_jac) continue;
      for (size_t p = 0; p < P_; ++p) {
        double g = 0.0;
        for (uint32_t n = 0; n < N_; ++n) {
          size_t l = size_t(s) * N_ + n;
          double r = value_[l] - rq_.target[n];
          if (jac_[p][l] != 0.0) g += 2.0 * r * jac_[p][l];
        }
        at(grad_, p, s) = g / N_;
      }
    }
  }

  // Records the loss of each live start at step k; keeps the best point; retires non-finite ones.
  void observe(int k, const std::vector<double>& x) {
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) continue;
      bool finite = std::isfinite(loss_[s]);
      for (size_t p = 0; finite && p < P_; ++p) finite = std::isfinite(grad_[p * S_ + s]);
      if (!finite) {
        retired_[s] = 1;
        continue;
      }
      if (k >= 0 && k < rq_.steps) rq_.history[size_t(k) * S_ + s] = loss_[s];
      if (loss_[s] < best_[s]) {
        best_[s] = loss_[s];
        for (size_t p = 0; p < P_; ++p) best_x_[p * S_ + s] = x[p * S_ + s];
      }
    }
  }

  // Adam with torch.optim.Adam's exact update (defaults, no weight decay, no amsgrad).
  void adam() {
    std::vector<double> m(P_ * S_, 0.0), v(P_ * S_, 0.0);
    for (int k = 0; k < rq_.steps; ++k) {
      evaluate(x_);
      observe(k, x_);
      double t = k + 1;
      double bc1 = 1.0 - std::pow(rq_.beta1, t);
      double bc2 = 1.0 - std::pow(rq_.beta2, t);
      double step = rq_.lr / bc1;
      double bc2s = std::sqrt(bc2);
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s]) continue;
        for (size_t p = 0; p < P_; ++p) {
          size_t i = p * S_ + s;
          double g = grad_[i];
          m[i] += (g - m[i]) * (1.0 - rq_.beta1);
          v[i] = v[i] * rq_.beta2 + (1.0 - rq_.beta2) * g * g;
          double denom = std::sqrt(v[i]) / bc2s + rq_.eps;
          x_[i] += -step * (m[i] / denom);
        }
      }
      project(x_);
    }
    evaluate(x_, false);
    for (uint32_t s = 0; s < S_; ++s)  // the final point counts if it is the best
      if (!retired_[s] && std::isfinite(loss_[s]) && loss_[s] < best_[s]) {
        best_[s] = loss_[s];
        for (size_t p = 0; p < P_; ++p) best_x_[p * S_ + s] = x_[p * S_ + s];
      }
  }

  // Levenberg-Marquardt with Marquardt's diagonal scaling; one evaluation per step gives every
  // start's residuals and per-lane Jacobian rows (one reverse sweep).
  void lm() {
    std::vector<double> lambda(S_, 1e-3), xt = x_, A(P_ * P_), b(P_), d(P_);
    std::vector<double> loss_cur(S_), J(P_ * size_t(S_) * N_), r(size_t(S_) * N_);
    evaluate(x_);
    observe(0, x_);
    auto keep = [&](uint32_t s) {
      loss_cur[s] = loss_[s];
      for (uint32_t n = 0; n < N_; ++n) {
        size_t l = size_t(s) * N_ + n;
        r[l] = value_[l] - rq_.target[n];
        for (size_t p = 0; p < P_; ++p) J[p * S_ * N_ + l] = jac_[p][l];
      }
    };
    for (uint32_t s = 0; s < S_; ++s) keep(s);
    for (int k = 1; k < rq_.steps; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) {
        for (size_t p = 0; p < P_; ++p) xt[p * S_ + s] = x_[p * S_ + s];
        if (retired_[s] || done_[s]) continue;
        // (J^T J + lambda diag(J^T J)) d = -J^T r
        for (size_t i = 0; i < P_; ++i) {
          double bi = 0.0;
          for (uint32_t n = 0; n < N_; ++n) {
            size_t l = size_t(s) * N_ + n;
            bi += J[i * S_ * N_ + l] * r[l];
          }
          b[i] = -bi;
          for (size_t j = 0; j < P_; ++j) {
            double a = 0.0;
            for (uint32_t n = 0; n < N_; ++n) {
              size_t l = size_t(s) * N_ + n;
              a += J[i * S_ * N_ + l] * J[j * S_ * N_ + l];
            }
            A[i * P_ + j] = a;
          }
        }
        for (size_t i = 0; i < P_; ++i) A[i * P_ + i] += lambda[s] * std::max(A[i * P_ + i], 1e-12);
        if (!solve_spd(A, b, d)) {
          lambda[s] *= 10.0;
          continue;
        }
        double dn = 0.0, xn = 0.0;
        for (size_t p = 0; p < P_; ++p) {
          xt[p * S_ + s] = x_[p * S_ + s] + d[p];
          dn += d[p] * d[p];
          xn += x_[p * S_ + s] * x_[p * S_ + s];
        }
        if (std::sqrt(dn) <= rq_.tol * (std::sqrt(xn) + rq_.tol)) {
          done_[s] = 1;
          continue;
        }
        any = true;
      }
      if (!any) break;
      project(xt);
      evaluate(xt);
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s] || done_[s]) continue;
        bool ok = std::isfinite(loss_[s]) && loss_[s] <= loss_cur[s];
        for (size_t p = 0; ok && p < P_; ++p) ok = std::isfinite(grad_[p * S_ + s]);
        if (ok) {
          double rel = (loss_cur[s] - loss_[s]) / std::max(loss_cur[s], 1e-300);
          for (size_t p = 0; p < P_; ++p) x_[p * S_ + s] = xt[p * S_ + s];
          keep(s);
          lambda[s] = std::max(lambda[s] / 3.0, 1e-12);
          if (loss_[s] == 0.0 || rel < 1e-15) done_[s] = 1;
        } else {
          lambda[s] = std::min(lambda[s] * 4.0, 1e16);
          if (lambda[s] >= 1e16) done_[s] = 1;
        }
      }
      // record each start's current (accepted) loss
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s]) continue;
        rq_.history[size_t(k) * S_ + s] = loss_cur[s];
        if (loss_cur[s] < best_[s]) {
          best_[s] = loss_cur[s];
          for (size_t p = 0; p < P_; ++p) best_x_[p * S_ + s] = x_[p * S_ + s];
        }
      }
    }
  }

  // L-BFGS (memory 10) with a backtracking Armijo line search run in lockstep across starts.
  void lbfgs() {
    const size_t M = 10;
    std::vector<std::vector<double>> sh(S_), yh(S_);
    std::vector<double> fcur(S_), gcur(P_ * S_), dir(P_ * S_), alpha(S_, 1.0), xt = x_;
    std::vector<double> q(P_), al(M);
    evaluate(x_);
    observe(0, x_);
    fcur = loss_;
    gcur = grad_;
    std::vector<uint8_t> searching(S_, 0);
    int tries_left_init = 30;
    std::vector<int> tries(S_, tries_left_init);
    auto direction = [&](uint32_t s) {
      for (size_t p = 0; p < P_; ++p) q[p] = gcur[p * S_ + s];
      size_t h = sh[s].size() / P_;
      for (size_t i = h; i-- > 0;) {
        double sy = 0, sq = 0;
        for (size_t p = 0; p < P_; ++p) {
          sy += sh[s][i * P_ + p] * yh[s][i * P_ + p];
          sq += sh[s][i * P_ + p] * q[p];
        }
        al[i] = sq / sy;
        for (size_t p = 0; p < P_; ++p) q[p] -= al[i] * yh[s][i * P_ + p];
      }
      double gamma = 1.0;
      if (h) {
        double sy = 0, yy = 0;
        for (size_t p = 0; p < P_; ++p) {
          sy += sh[s][(h - 1) * P_ + p] * yh[s][(h - 1) * P_ + p];
          yy += yh[s][(h - 1) * P_ + p] * yh[s][(h - 1) * P_ + p];
        }
        gamma = sy / yy;
      } else {
        double gn = 0;
        for (size_t p = 0; p < P_; ++p) gn += q[p] * q[p];
        gamma = std::min(1.0, rq_.lr / std::max(std::sqrt(gn), 1e-300));
      }
      for (size_t p = 0; p < P_; ++p) q[p] *= gamma;
      for (size_t i = 0; i < h; ++i) {
        double sy = 0, yq = 0;
        for (size_t p = 0; p < P_; ++p) {
          sy += sh[s][i * P_ + p] * yh[s][i * P_ + p];
          yq += yh[s][i * P_ + p] * q[p];
        }
        double beta = yq / sy;
        for (size_t p = 0; p < P_; ++p) q[p] += sh[s][i * P_ + p] * (al[i] - beta);
      }
      for (size_t p = 0; p < P_; ++p) dir[p * S_ + s] = -q[p];
    };
    for (int k = 1; k < rq_.steps; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) {
        for (size_t p = 0; p < P_; ++p) xt[p * S_ + s] = x_[p * S_ + s];
        if (retired_[s] || done_[s]) continue;
        if (!searching[s]) {
          direction(s);
          double gd = 0;
          for (size_t p = 0; p < P_; ++p) gd += gcur[p * S_ + s] * dir[p * S_ + s];
          if (!(gd < 0)) {  // not a descent direction: restart from steepest descent
            sh[s].clear();
            yh[s].clear();
            direction(s);
          }
          alpha[s] = 1.0;
          searching[s] = 1;
          tries[s] = tries_left_init;
        }
        for (size_t p = 0; p < P_; ++p) xt[p * S_ + s] = x_[p * S_ + s] + alpha[s] * dir[p * S_ + s];
        any = true;
      }
      if (!any) break;
      project(xt);
      evaluate(xt);
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s] || done_[s]) continue;
        double gd = 0, sn = 0;
        for (size_t p = 0; p < P_; ++p) {
          gd += gcur[p * S_ + s] * dir[p * S_ + s];
          double st = xt[p * S_ + s] - x_[p * S_ + s];
          sn += st * st;
        }
        bool finite = std::isfinite(loss_[s]);
        for (size_t p = 0; finite && p < P_; ++p) finite = std::isfinite(grad_[p * S_ + s]);
        if (finite && loss_[s] <= fcur[s] + 1e-4 * alpha[s] * gd) {
          std::vector<double> st(P_), yt(P_);
          double sy = 0;
          for (size_t p = 0; p < P_; ++p) {
            st[p] = xt[p * S_ + s] - x_[p * S_ + s];
            yt[p] = grad_[p * S_ + s] - gcur[p * S_ + s];
            sy += st[p] * yt[p];
          }
          if (sy > 1e-300) {
            if (sh[s].size() / P_ == M) {
              sh[s].erase(sh[s].begin(), sh[s].begin() + P_);
              yh[s].erase(yh[s].begin(), yh[s].begin() + P_);
            }
            sh[s].insert(sh[s].end(), st.begin(), st.end());
            yh[s].insert(yh[s].end(), yt.begin(), yt.end());
          }
          double drop = fcur[s] - loss_[s];
          for (size_t p = 0; p < P_; ++p) {
            x_[p * S_ + s] = xt[p * S_ + s];
            gcur[p * S_ + s] = grad_[p * S_ + s];
          }
          fcur[s] = loss_[s];
          searching[s] = 0;
          double xn = 0;
          for (size_t p = 0; p < P_; ++p) xn += x_[p * S_ + s] * x_[p * S_ + s];
          if (std::sqrt(sn) <= rq_.tol * (std::sqrt(xn) + rq_.tol) || fcur[s] == 0.0 ||
              drop <= 1e-15 * std::fabs(fcur[s]))
            done_[s] = 1;
        } else {
          alpha[s] *= 0.5;
          if (--tries[s] <= 0) done_[s] = 1;
        }
      }
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s]) continue;
        rq_.history[size_t(k) * S_ + s] = fcur[s];
        if (fcur[s] < best_[s]) {
          best_[s] = fcur[s];
          for (size_t p = 0; p < P_; ++p) best_x_[p * S_ + s] = x_[p * S_ + s];
        }
      }
    }
  }

  // Solves the small symmetric positive definite system A d = b (Cholesky); false if not SPD.
  bool solve_spd(std::vector<double> A, const std::vector<double>& b, std::vector<double>& d) {
    size_t n = P_;
    for (size_t j = 0; j < n; ++j) {
      double s = A[j * n + j];
      for (size_t k = 0; k < j; ++k) s -= A[j * n + k] * A[j * n + k];
      if (!(s > 0) || !std::isfinite(s)) return false;
      double l = std::sqrt(s);
      A[j * n + j] = l;
      for (size_t i = j + 1; i < n; ++i) {
        double t = A[i * n + j];
        for (size_t k = 0; k < j; ++k) t -= A[i * n + k] * A[j * n + k];
        A[i * n + j] = t / l;
      }
    }
    std::vector<double> y(n);
    for (size_t i = 0; i < n; ++i) {
      double t = b[i];
      for (size_t k = 0; k < i; ++k) t -= A[i * n + k] * y[k];
      y[i] = t / A[i * n + i];
    }
    for (size_t i = n; i-- > 0;) {
      double t = y[i];
      for (size_t k = i + 1; k < n; ++k) t -= A[k * n + i] * d[k];
      d[i] = t / A[i * n + i];
    }
    return true;
  }
};

inline bool fit_guarded(FitRequest* rq, ErrorInfo* err) {
  return guarded(*err, [&] { Fitter(*rq).run(); });
}

}  // namespace ndvm

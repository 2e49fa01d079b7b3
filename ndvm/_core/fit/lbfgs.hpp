// L-BFGS over S starts at once (FitDriver), each start with its own strong-Wolfe line search
// (linesearch.hpp), every trial of every start in one batched evaluation.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "fit/driver.hpp"
#include "fit/linesearch.hpp"

namespace ndvm {

class LbfgsFit final : public FitDriver {
 public:
  explicit LbfgsFit(FitRequest& rq) : FitDriver(rq, rq.S) {}

 private:
  // Memory-10 L-BFGS; every start runs its own strong-Wolfe line search, all trials of all starts
  // in one batched evaluation. Bounds: variables at a bound with the gradient pushing outwards
  // are held, and the line search never leaves the box (its largest step is the distance to it).
  struct LbfgsState {
    std::vector<double> sm, ym, rho, d, g, gt, glo, ulo, al;
    size_t count = 0, head = 0;
    double f = 0, flo = 0;
    bool steepest = false;
    WolfeSearch ls;

    // A fresh state that keeps this one's buffers (each is assigned before use).
    void reset() {
      LbfgsState b;
      for (auto v : {&LbfgsState::sm, &LbfgsState::ym, &LbfgsState::rho, &LbfgsState::d,
                     &LbfgsState::g, &LbfgsState::gt, &LbfgsState::glo, &LbfgsState::ulo,
                     &LbfgsState::al})
        b.*v = std::move(this->*v);
      *this = std::move(b);
    }
  };
  struct LbfgsScratch {  // per-thread buffers kept between fits (FitScratch)
    std::vector<LbfgsState> st;
    std::vector<double> ut;
  };
  static constexpr size_t kMemory = 10;

  void optimize() override {
    thread_local LbfgsScratch sc;
    std::vector<LbfgsState>& st = sc.st;
    std::vector<double>& ut = sc.ut;
    if (st.size() < S_) st.resize(S_);
    ut = u_;
    evaluate(u_, kGrad);
    for (uint32_t s = 0; s < S_; ++s) {
      LbfgsState& b = st[s];
      b.reset();
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
      if (at_minimum(s, b)) stop(s, kGtol);
      else begin_search(s, b, ut);
    }
    for (int k = 1;; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) any = any || live(s);
      if (!any) break;
      if (k >= rq_.budget) break;  // budget: the remaining live starts keep kBudget
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

  // The decrease of the loss the quasi-Newton model of start s predicts along its direction,
  // -g^T H g / 2 (b.d = -H g; held components left out); infinite without curvature pairs.
  double predicted_decrease(uint32_t s, LbfgsState& b) {
    if (b.count == 0) return kInf;
    two_loop(b);  // (begin_search makes it again when the search goes on)
    double pred = 0;
    for (size_t p = 0; p < P_; ++p) {
      double up = u_[p * S_ + s], dp = b.d[p];
      if ((dp < 0 && up <= lo_[p]) || (dp > 0 && up >= hi_[p])) continue;
      pred -= b.g[p] * dp;
    }
    return 0.5 * pred;
  }

  // Whether start s has no more to gain: the stop tests, relative to the loss, are met far from
  // a minimum where the loss is huge. A parameter near 1e15 from a start near 1 makes a loss
  // ~1e30 whose gradient, ~1e15, is below gtol = 1e-10 of it, and whose first steps reduce it
  // by less than ftol of it: L-BFGS claimed convergence there. So with curvature pairs the
  // quasi-Newton model must also predict no decrease above ftol of the loss (else the search
  // goes on, and ends at the budget if it cannot descend); without any, gtol is met by the
  // gradient alone, absolutely (ftol as before).
  bool model_flat(uint32_t s, LbfgsState& b) {
    return predicted_decrease(s, b) <= std::max(rq_.ftol, lm::kEps) * std::max(1.0, std::fabs(b.f));
  }
  bool at_minimum(uint32_t s, LbfgsState& b) {
    if (!gradient_small(s, u_, b.g.data(), 1, b.f)) return false;
    return b.count == 0 ? gradient_small(s, u_, b.g.data(), 1, 0.0) : model_flat(s, b);
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
    if (at_minimum(s, b)) {
      stop(s, kGtol);
    } else if (fold - fnew <= rq_.ftol * std::max(std::fabs(fold), std::fabs(fnew)) &&
               (b.count == 0 || model_flat(s, b))) {
      stop(s, kFtol);
    } else {
      begin_search(s, b, ut);
    }
  }
};

}  // namespace ndvm

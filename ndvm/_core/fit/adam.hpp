// Adam over S starts at once (FitDriver): torch.optim.Adam's exact update, reading each start's
// loss and gradient from the core's MSE mode (no per-lane Jacobian).
#pragma once
#include <cmath>
#include <vector>

#include "fit/driver.hpp"

namespace ndvm {

class AdamFit final : public FitDriver {
 public:
  explicit AdamFit(FitRequest& rq) : FitDriver(rq, rq.S) {}

 private:
  // torch.optim.Adam's exact update (defaults, no weight decay, no amsgrad). Stops a start early
  // only when its projected gradient meets gtol; otherwise it runs all `steps`.
  void optimize() override {
    thread_local std::vector<double> m, v;  // (kept between fits: FitScratch)
    m.assign(P_ * S_, 0.0);
    v.assign(P_ * S_, 0.0);
    for (int k = 0; k < rq_.budget; ++k) {
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
};

}  // namespace ndvm

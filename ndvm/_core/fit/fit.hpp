// Native calibration: Adam, L-BFGS and Levenberg-Marquardt over S starts at once, one optimizer a
// file (adam.hpp, lbfgs.hpp, lm.hpp) on the shared per-start driver (driver.hpp). run_fit is the
// one place an optimizer is chosen; fit_guarded is its non-throwing entry for the Cython layer.
#pragma once
#include "fit/adam.hpp"
#include "fit/lbfgs.hpp"
#include "fit/lm.hpp"
#include "error.hpp"

namespace ndvm {

inline void run_fit(FitRequest& rq) {
  switch (rq.optimizer) {
    case Optimizer::Adam: AdamFit(rq).run(); return;
    case Optimizer::LBFGS: LbfgsFit(rq).run(); return;
    case Optimizer::LM:
      if (rq.scaling == Scaling::Both) return lm_both(rq);
      LmFit(rq, rq.scaling == Scaling::Unscaled ? 0 : rq.S).run();
      return;
  }
}

inline bool fit_guarded(FitRequest* rq, ErrorInfo* err) {
  return guarded(*err, [&] { run_fit(*rq); });
}

}  // namespace ndvm

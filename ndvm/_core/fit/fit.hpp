// Native calibration: Adam, L-BFGS and Levenberg-Marquardt over S starts at once, one optimizer a
// file (adam.hpp, lbfgs.hpp, lm.hpp) on the shared per-start driver (driver.hpp). run_fit is the
// one place an optimizer is chosen (a fit of very many lanes runs its starts in groups); fit_guarded
// is its non-throwing entry for the Cython layer.
#pragma once
#include <limits>
#include "fit/adam.hpp"
#include "fit/lbfgs.hpp"
#include "fit/lm.hpp"
#include "error.hpp"

namespace ndvm {

// Lanes (starts x points) one batched evaluation of an LM fit holds at most: a fit of more runs its
// starts in groups, one group after the other (run_fit). LM keeps every lane's Jacobian, residuals
// and trial besides the evaluation's own values: 8 starts on 10^6 points took 1.1 GB and on
// 3 x 10^6 points 3.3 GB at once. Its starts are independent, each lane's values do not depend on
// the lanes beside it (vmath.hpp) and LM reduces each start's residuals itself, so every start
// ends as it would in one batch, bit for bit. (Adam and L-BFGS keep no Jacobian, ~360 MB for the
// same fit; their losses are reduced by the core across the batch's lanes, whose grouping would
// move their last bits: they run in one batch.)
constexpr size_t kLanesAtOnce = size_t(1) << 21;

inline void run_optimizer(FitRequest& rq) {
  switch (rq.optimizer) {
    case Optimizer::Adam: AdamFit(rq).run(); return;
    case Optimizer::LBFGS: LbfgsFit(rq).run(); return;
    case Optimizer::LM:
      if (rq.scaling == Scaling::Both) return lm_both(rq);
      LmFit(rq, rq.scaling == Scaling::Unscaled ? 0 : rq.S).run();
      return;
  }
}

// How many starts one batch of an LM fit runs at once: all of them unless they hold more than
// kLanesAtOnce lanes (scaling "both" runs two lanes a start); the other optimizers run all.
inline uint32_t starts_at_once(const FitRequest& rq) {
  if (rq.optimizer != Optimizer::LM) return rq.S;
  size_t per_start = size_t(rq.N) * (rq.scaling == Scaling::Both ? 2 : 1);
  size_t most = std::max<size_t>(1, kLanesAtOnce / std::max<size_t>(1, per_start));
  return uint32_t(std::min<size_t>(rq.S, most));
}

// Runs the fit's starts in groups of G, each group a request of its own, and writes the outputs
// one batch of all the starts writes: those laid out start by start ([S], [S][P]) are the whole
// request's at the group's offset; the [P][S] initial values and fitted points and the
// [budget][S] history are copied in and out. In one batch, a start that has stopped is recorded
// at every later step until the last start stops (its final loss; NaN once retired), and
// n_evals counts the batch's evaluations (one a step): the history rows after a group's last
// step repeat that step's, and n_evals is the largest group's.
inline void run_in_groups(FitRequest& rq, uint32_t G) {
  const size_t P = rq.param_binding.size(), rows = size_t(rq.budget), S = rq.S;
  struct Group {  // per-thread buffers kept between fits ([P][G] and [budget][G]: small)
    std::vector<double> params, history;
    std::vector<size_t> last;  // each start's group's last history row + 1 (0: none)
  };
  thread_local Group g;
  struct Hold {  // the thread's fit buffers kept from group to group, released after the last
    Hold() { ++keeping_all(); }  // (however it ends: a fit this large keeps none, as one batch)
    ~Hold() {
      --keeping_all();
      FitScratch::here() = FitScratch();
      LmFit::trim(std::numeric_limits<size_t>::max());  // (as a huge fit's: released)
    }
  } hold;
  std::vector<size_t>& last = g.last;
  last.assign(S, 0);
  int64_t evals = 0;
  size_t longest = 0;
  for (size_t first = 0; first < S; first += G) {
    const uint32_t n = uint32_t(std::min<size_t>(G, S - first));
    FitRequest sub = rq;
    sub.S = n;
    sub.n_evals = 0;
    g.params.resize(P * n);
    g.history.resize(rows * n);
    for (size_t p = 0; p < P; ++p)
      std::copy_n(rq.params + p * S + first, n, g.params.begin() + p * n);
    sub.params = g.params.data();
    sub.history = g.history.data();
    sub.losses = rq.losses + first;
    sub.converged = rq.converged + first;
    if (rq.status) sub.status = rq.status + first;
    if (rq.flags) sub.flags = rq.flags + first * P;
    if (rq.cov) sub.cov = rq.cov + first * P * P;
    if (rq.stderr_) sub.stderr_ = rq.stderr_ + first * P;
    run_optimizer(sub);
    evals = std::max(evals, sub.n_evals);
    for (size_t p = 0; p < P; ++p)
      std::copy_n(g.params.begin() + p * n, n, rq.params + p * S + first);
    size_t used = 0;  // (rows after the group's last step are NaN)
    for (size_t k = 0; k < rows; ++k) {
      std::copy_n(g.history.begin() + k * n, n, rq.history + k * S + first);
      for (uint32_t j = 0; j < n; ++j)
        if (!std::isnan(g.history[k * n + j])) used = k + 1;
    }
    std::fill(last.begin() + first, last.begin() + first + n, used);
    longest = std::max(longest, used);
  }
  for (size_t s = 0; s < S; ++s)
    for (size_t k = last[s]; k < longest && last[s] > 0; ++k)
      rq.history[k * S + s] = rq.history[(last[s] - 1) * S + s];
  rq.n_evals += evals;
}

inline void run_fit(FitRequest& rq) {
  uint32_t G = starts_at_once(rq);
  if (G < rq.S) return run_in_groups(rq, G);
  run_optimizer(rq);
}

inline bool fit_guarded(FitRequest* rq, ErrorInfo* err) {
  return guarded(*err, [&] { run_fit(*rq); });
}

}  // namespace ndvm

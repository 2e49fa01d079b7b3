// What a native calibration is asked for and where its outputs go (FitRequest), the optimizers,
// losses and LM scalings it knows, and why a start stopped (FitStatus). One request is one fit of
// S starts over N points; the Cython layer fills it (FitSpec) and points it at a batch's buffers
// (FitLayout, outputs.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "client_api.hpp"

namespace ndvm {

enum class Optimizer : int { Adam = 0, LBFGS = 1, LM = 2 };
enum class LossKind : int { MSE = 0, Value = 1 };
// LM's trust-region scaling (see lm.hpp): MINPACK's column scaling, none, or both as two lanes
enum class Scaling : int { Jac = 0, Unscaled = 1, Both = 2 };

// Why a start stopped. 0..4 are scipy.optimize.least_squares's codes; converged means 1..4.
enum FitStatus : int8_t {
  kDegenerate = -3,  // stopped where a parameter no longer affects the model (column vanished)
  kNonFinite = -2,   // the loss or gradient is not finite at the start, or around the stop point
  kNoProgress = -1,  // no further progress possible (line search / trust region at its limit)
  kBudget = 0,       // the budget ran out before a tolerance was met
  kGtol = 1,         // gradient test met
  kFtol = 2,         // relative reduction of the loss below ftol
  kXtol = 3,         // relative step (trust-region radius) below xtol
  kFtolXtol = 4,     // both
};

// An evaluation after the fit (after.hpp): the fitted model, at its best start's parameters, run
// on M other points and reduced per segment of them. Built once per set of free names and shared,
// read-only, by the fits of a batch.
struct AfterSegment {
  uint32_t start = 0, stop = 0;   // lanes [start, stop) of the M points
  const double* ref = nullptr;    // [stop - start] the values are compared with, or null: `center`
  double center = 0.0;
};
struct AfterFit {
  std::vector<Binding> bindings;  // the program's free names bound at the M points (parameters
                                  // are rebound to the fit's best start)
  uint32_t M = 1;
  std::vector<AfterSegment> segments;
};
// Where an after-fit evaluation writes: [0] 1 evaluated, -1 the evaluation raised, 0 not run
// (the fit failed); then per segment: non-finite values, max |value - ref| and the sum of
// (value - ref)^2 in numpy's pairwise order (kAfterStats numbers).
constexpr size_t kAfterStats = 3;
inline size_t after_size(const AfterFit* a) {
  return a ? 1 + kAfterStats * a->segments.size() : 0;
}

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
  int budget = 50;                  // Adam: steps; LM, L-BFGS: batched evaluations
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
  double* history = nullptr;        // out [budget][S]: loss at each step (NaN once retired)
  uint8_t* converged = nullptr;     // out [S]
  int8_t* status = nullptr;         // out [S] or null: FitStatus
  double* cov = nullptr;            // out [S][P][P] or null
  double* stderr_ = nullptr;        // out [S][P] or null
  uint8_t* flags = nullptr;         // out [S][P] or null: 1 not identifiable, 2 column vanished,
                                    // 4 ended on a bound
  int64_t n_evals = 0;              // out
  const AfterFit* after = nullptr;  // or null: nothing is evaluated after the fit
  double* after_out = nullptr;      // out [after_size(after)]
  // no fit (a program without parameters, P = 0): only the evaluation after it is run; the
  // losses and the history are NaN, no evaluation is counted
  bool evaluate_only = false;
};

}  // namespace ndvm

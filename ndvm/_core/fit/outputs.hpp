// The output layout of a batch of fits (FitLayout): every fit's outputs live in one float64 and
// one uint8 buffer that the Cython layer allocates once per run; a FitSlot says where fit k's
// lie (offsets in items of its buffer), its shape and its number of evaluations. A FitSlot has
// int64 fields only, so that Python reads and pickles a table of them as a structured array with
// named fields (ndvm._core.SLOT_FIELDS, the same names in the same order).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "fit/request.hpp"

namespace ndvm {

struct FitSlot {
  int64_t init;          // into FitLayout::init: [P, S] starting values
  int64_t params;        // float64 [P, S]: in, the starting values; out, each start's best point
  int64_t losses;        // float64 [S]
  int64_t history;       // float64 [history_rows, S]
  int64_t cov;           // float64 [S, P, P] (uncertainty only)
  int64_t stderr_;       // float64 [S, P] (uncertainty only)
  int64_t status;        // uint8 buffer: [S] int8
  int64_t converged;     // uint8 [S]
  int64_t flags;         // uint8 [S, P]
  int64_t P, S;
  int64_t history_rows;  // rows of the loss history (the request's steps, at least 1)
  int64_t uncertainty;   // 1: cov and stderr are written
  int64_t n_evals;       // batched evaluations, once the fit has run
  int64_t after;         // float64 [after_size]: the evaluation after the fit (after.hpp)
  int64_t after_size;    // 0: none was asked for
};
constexpr size_t kFitSlotFields = 16;
static_assert(sizeof(FitSlot) == kFitSlotFields * sizeof(int64_t), "FitSlot must not be padded");

struct FitLayout {
  std::vector<FitSlot> slots;
  std::vector<double> init;  // the staged fits' starting values
  size_t n64 = 0, n8 = 0;    // items of the two buffers

  // Empties the layout (keeping its memory for the next batch).
  void clear() {
    slots.clear();
    init.clear();
    n64 = n8 = 0;
  }

  // Places one more fit of rq's shape, starting from x0 [P, S]; returns its index.
  size_t add(const FitRequest& rq, const double* x0) {
    FitSlot sl{};
    sl.P = int64_t(rq.param_binding.size());
    sl.S = rq.S;
    sl.history_rows = std::max(rq.budget, 1);
    sl.uncertainty = rq.uncertainty && sl.P > 0;
    sl.init = int64_t(init.size());
    init.insert(init.end(), x0, x0 + sl.P * sl.S);
    sl.params = int64_t(n64);
    sl.losses = sl.params + sl.P * sl.S;
    sl.history = sl.losses + sl.S;
    sl.cov = sl.history + sl.history_rows * sl.S;
    sl.stderr_ = sl.cov + (sl.uncertainty ? sl.S * sl.P * sl.P : 0);
    sl.after = sl.stderr_ + (sl.uncertainty ? sl.S * sl.P : 0);
    sl.after_size = int64_t(after_size(rq.after));
    n64 = size_t(sl.after + sl.after_size);
    sl.status = int64_t(n8);
    sl.converged = sl.status + sl.S;
    sl.flags = sl.converged + sl.S;
    n8 = size_t(sl.flags + sl.S * sl.P);
    slots.push_back(sl);
    return slots.size() - 1;
  }

  // Points every request (rq[k] is fit k's) at its places in the buffers and writes its
  // starting values there.
  void point(FitRequest* rq, double* f64, uint8_t* u8) const {
    for (size_t k = 0; k < slots.size(); ++k) {
      const FitSlot& sl = slots[k];
      FitRequest& r = rq[k];
      r.params = nullptr;
      if (sl.P) {
        r.params = f64 + sl.params;
        std::memcpy(r.params, init.data() + sl.init, size_t(sl.P * sl.S) * sizeof(double));
      }
      r.losses = f64 + sl.losses;
      r.history = f64 + sl.history;
      r.converged = u8 + sl.converged;
      r.status = reinterpret_cast<int8_t*>(u8 + sl.status);
      r.cov = sl.uncertainty ? f64 + sl.cov : nullptr;
      r.stderr_ = sl.uncertainty ? f64 + sl.stderr_ : nullptr;
      r.flags = sl.P ? u8 + sl.flags : nullptr;
      r.after_out = nullptr;
      if (sl.after_size) {
        r.after_out = f64 + sl.after;
        std::fill(r.after_out, r.after_out + sl.after_size, 0.0);  // (0: not run)
      }
    }
  }

  // Records each fit's number of evaluations once the batch has run.
  void collect(const FitRequest* rq) {
    for (size_t k = 0; k < slots.size(); ++k) slots[k].n_evals = rq[k].n_evals;
  }
};

// The best of S starts of these losses: the first of least finite loss (0 when none is finite).
inline int64_t best_of(const double* f, int64_t S) {
  double least = std::numeric_limits<double>::infinity();
  int64_t best = 0;
  for (int64_t i = 0; i < S; ++i)
    if (std::isfinite(f[i]) && f[i] < least) {
      least = f[i];
      best = i;
    }
  return best;
}

// Fit sl's best start.
inline int64_t best_start(const FitSlot& sl, const double* f64) {
  return best_of(f64 + sl.losses, sl.S);
}

}  // namespace ndvm

// A chunk of calibrations run back to back in one native call with the GIL released (a chunk of
// ndvm.fit_many; ndvm.fit is a chunk of one). Every fit is independent: its request points at its
// own slice of the caller's result arrays, and a fit that fails keeps its error in its own
// ErrorInfo while the others run on. All fits of a chunk share one machine (one per thread).
#pragma once
#include <cstdint>

#include "fit.hpp"

namespace ndvm {

inline void fit_batch(FitRequest* rq, size_t n, void* machine, int dtype, ErrorInfo* err,
                      uint8_t* ok) {
  for (size_t i = 0; i < n; ++i) {
    rq[i].machine = machine;
    rq[i].dtype = dtype;
    rq[i].n_evals = 0;
    ok[i] = fit_guarded(&rq[i], &err[i]);
  }
}

}  // namespace ndvm

// The evaluation after a fit (FitRequest::after): the fitted model at its best start's parameters
// run once more, on the request's other points, on the fitting thread's machine, and reduced per
// segment of the points to three numbers (the co-search scores a candidate from them without
// evaluating it again under the GIL). The sums follow numpy's pairwise summation exactly, so that
// a mean computed here equals numpy's np.mean of the same values bit for bit.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "fit/outputs.hpp"
#include "fit/request.hpp"

namespace ndvm {

// numpy's pairwise sum of a[0..n) (its add.reduce over a contiguous float64 array, started at 0):
// eight accumulators over blocks of at most 128, halves (at a multiple of 8) above that.
inline double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// Per segment of v: non-finite values, max |v - ref| (NaN when one is NaN, as numpy's max) and
// the pairwise sum of (v - ref)^2; `work` is scratch of at least the segment's length.
inline void after_reduce(const AfterSegment& g, const double* v, double* work, double* out) {
  size_t n = g.stop - g.start;
  double bad = 0.0, most = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (size_t i = 0; i < n; ++i) {
    double x = v[g.start + i];
    if (!std::isfinite(x)) bad += 1.0;
    double d = x - (g.ref ? g.ref[i] : g.center);
    double a = std::fabs(d);
    if (std::isnan(a)) nan = true;
    else if (a > most) most = a;
    work[i] = d * d;
  }
  out[0] = bad;
  out[1] = nan ? std::numeric_limits<double>::quiet_NaN() : most;
  out[2] = pairwise_sum(work, n);
}

// Runs rq's after-fit evaluation once its fit has run (rq->params holds each start's best point,
// rq->losses their losses): writes rq->after_out. The thread's scratch is reused from fit to fit.
inline void evaluate_after(const FitRequest* rq) {
  const AfterFit* a = rq->after;
  double* out = rq->after_out;
  if (!a || !out) return;
  thread_local std::vector<Binding> binds;
  thread_local std::vector<double> best, value, work;
  size_t P = rq->param_binding.size(), S = rq->S;
  int64_t b = best_of(rq->losses, int64_t(S));  // (the start a FitResult's params are)
  best.resize(P ? P : 1);
  for (size_t p = 0; p < P; ++p) best[p] = rq->params[p * S + size_t(b)];
  binds.assign(a->bindings.begin(), a->bindings.end());
  for (size_t p = 0; p < P; ++p) {  // each parameter a scalar, as Evaluator.evaluate binds floats
    Binding& bd = binds[size_t(rq->param_binding[p])];
    bd.values = &best[p];
    bd.rows = 0;
  }
  value.resize(a->M);
  RunRequest run;
  run.bindings = binds.data();
  run.nbind = binds.size();
  run.S = 1;
  run.N = a->M;
  run.grad = false;
  run.value_out = value.data();
  ErrorInfo err;
  if (!rq->entry(rq->machine, rq->dtype, rq->expanded, rq->compiled, &run, &err)) {
    out[0] = -1.0;
    return;
  }
  out[0] = 1.0;
  work.resize(a->M);
  for (size_t k = 0; k < a->segments.size(); ++k)
    after_reduce(a->segments[k], value.data(), work.data(), out + 1 + kAfterStats * k);
}

}  // namespace ndvm

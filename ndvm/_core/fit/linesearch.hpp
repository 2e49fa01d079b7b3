// A line search that finds a step satisfying the strong Wolfe conditions (sufficient decrease
// c1 and curvature |phi'(a)| <= c2 |phi'(0)|), written as a state machine so that many starts can
// search at once: each observe() digests one evaluated trial and says what to do next
// (bracketing, then zoom by safeguarded cubic interpolation: Nocedal & Wright, Alg. 3.5/3.6).
// A non-finite trial counts as an infinitely high value: the bracket shrinks towards 0. A trial
// between the start and the best point that rises above the start reveals a barrier (a pole)
// between them: the search then stays on the near side, in the start's basin.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>

namespace ndvm {

class WolfeSearch {
 public:
  enum Result { Continue, Accept, AcceptLo, Fail };

  double a = 0.0;        // the trial step to evaluate next
  bool took_lo = false;  // the last observed trial became the best point of the search (lo)

  // phi(0) = f0, phi'(0) = d0 < 0; a0 the first trial; amax the largest feasible step.
  void start(double f0, double d0, double a0, double amax) {
    f0_ = f0;
    d0_ = d0;
    amax_ = amax;
    a = std::min(a0, amax);
    prev_ = 0.0;
    fprev_ = f0;
    dprev_ = d0;
    lo_ = 0.0;
    flo_ = f0;
    dlo_ = d0;
    zoom_ = false;
    unresolved_ = false;
    trials_ = 0;
  }

  // The step of the best point accepted by AcceptLo.
  double lo() const { return lo_; }

  // The search ended because phi could not change by more than its rounding error over the
  // bracket: the start point is a minimizer along the direction to machine precision.
  bool unresolved() const { return unresolved_; }

  // Digests phi(a) = f, phi'(a) = d of the current trial.
  Result observe(double f, double d) {
    took_lo = false;
    if (!std::isfinite(f) || !std::isfinite(d)) {
      f = std::numeric_limits<double>::infinity();
      d = std::numeric_limits<double>::quiet_NaN();
    }
    ++trials_;
    bool armijo = f <= f0_ + c1 * a * d0_;
    if (!zoom_) {
      // A tie with the last trial where the slope is at least half as steep: the step changed
      // phi by less than its rounding, which says nothing of a minimum (a parameter that must reach
      // 3e17 moves by 1 at the first trial of a steepest descent from near 0: L-BFGS took the
      // tie for a bracket, and then a step of no visible gain for convergence, ftol met at the
      // start): extrapolate on until phi shows the descent.
      bool rounding_tie = f == fprev_ && d < 0 && d <= 0.5 * dprev_ &&
                          (a - prev_) * std::fabs(d) <= 10.0 * kEpsilon * std::fabs(f);
      if (!armijo || (trials_ > 1 && f >= fprev_ && !rounding_tie))
        return begin_zoom(prev_, fprev_, dprev_, a, f, d);
      took_lo = true;
      lo_ = a;
      flo_ = f;
      dlo_ = d;
      if (std::fabs(d) <= -c2 * d0_) return Accept;
      if (d >= 0) return begin_zoom(a, f, d, prev_, fprev_, dprev_);
      if (a >= amax_) return Accept;  // still descending at the boundary of the feasible box
      if (trials_ >= kMaxTrials) return AcceptLo;
      // extrapolate: a cubic step, kept within [a + 1.1 (a - prev), a + 4 (a - prev)]
      double lo = a + 1.1 * (a - prev_), hi = a + 4.0 * (a - prev_);
      double next = cubic(prev_, fprev_, dprev_, a, f, d);
      if (!(next >= lo && next <= hi)) next = hi;
      prev_ = a;
      fprev_ = f;
      dprev_ = d;
      a = std::min(next, amax_);
      return Continue;
    }
    if (f > f0_ && lo_ > 0 && a > 0 && a < lo_) {
      // a barrier between the start and the best point (a pole, or a region where the model is
      // not finite): that point lies in another basin; bracket the near side [0, a] instead
      lo_ = 0.0;
      flo_ = f0_;
      dlo_ = d0_;
      hi_ = a;
      fhi_ = f;
      dhi_ = d;
    } else if (!armijo || f >= flo_) {
      hi_ = a;
      fhi_ = f;
      dhi_ = d;
    } else {
      took_lo = true;
      if (std::fabs(d) <= -c2 * d0_) {
        lo_ = a;
        flo_ = f;
        dlo_ = d;
        return Accept;
      }
      if (d * (hi_ - lo_) >= 0) {
        hi_ = lo_;
        fhi_ = flo_;
        dhi_ = dlo_;
      }
      lo_ = a;
      flo_ = f;
      dlo_ = d;
    }
    return next_zoom();
  }

  static constexpr double c1 = 1e-4, c2 = 0.9;

 private:
  static constexpr int kMaxTrials = 40;
  double f0_ = 0, d0_ = 0, amax_ = 0;
  double prev_ = 0, fprev_ = 0, dprev_ = 0;
  double lo_ = 0, flo_ = 0, dlo_ = 0, hi_ = 0, fhi_ = 0, dhi_ = 0;
  bool zoom_ = false, unresolved_ = false;
  int trials_ = 0;
  static constexpr double kEpsilon = std::numeric_limits<double>::epsilon();

  Result begin_zoom(double lo, double flo, double dlo, double hi, double fhi, double dhi) {
    zoom_ = true;
    lo_ = lo;
    flo_ = flo;
    dlo_ = dlo;
    hi_ = hi;
    fhi_ = fhi;
    dhi_ = dhi;
    return next_zoom();
  }

  Result next_zoom() {
    double width = std::fabs(hi_ - lo_);
    // unresolved: no point of the bracket can lower phi by more than its rounding error (to
    // first order), so more trials only sample noise
    unresolved_ = std::max(lo_, hi_) * std::fabs(d0_) <= 10.0 * kEpsilon * std::fabs(f0_);
    if (trials_ >= kMaxTrials || width <= 1e-15 * std::max(std::fabs(lo_), std::fabs(hi_)) ||
        width == 0.0 || unresolved_)
      return lo_ > 0 ? AcceptLo : Fail;
    double left = std::min(lo_, hi_), right = std::max(lo_, hi_);
    double next;
    if (!std::isfinite(fhi_)) {
      next = lo_ + 0.1 * (hi_ - lo_);  // the far end is not finite: back off fast
    } else {
      next = cubic(lo_, flo_, dlo_, hi_, fhi_, dhi_);
      double margin = 0.1 * width;
      if (!(next >= left + margin && next <= right - margin)) {
        next = quadratic(lo_, flo_, dlo_, hi_, fhi_);
        if (!(next >= left + margin && next <= right - margin)) next = 0.5 * (lo_ + hi_);
      }
    }
    if (next == lo_ || next == hi_) return lo_ > 0 ? AcceptLo : Fail;
    a = next;
    return Continue;
  }

  // Minimizer of the cubic through (a, fa, da) and (b, fb, db); NaN when it has none.
  static double cubic(double a, double fa, double da, double b, double fb, double db) {
    double d1 = da + db - 3.0 * (fa - fb) / (a - b);
    double disc = d1 * d1 - da * db;
    if (!(disc >= 0) || !std::isfinite(disc)) return std::numeric_limits<double>::quiet_NaN();
    double d2 = std::copysign(std::sqrt(disc), b - a);
    double den = db - da + 2.0 * d2;
    if (den == 0.0) return std::numeric_limits<double>::quiet_NaN();
    return b - (b - a) * (db + d2 - d1) / den;
  }

  // Minimizer of the quadratic with value fa and slope da at a and value fb at b.
  static double quadratic(double a, double fa, double da, double b, double fb) {
    double h = b - a;
    double c = (fb - fa - da * h) / (h * h);
    if (!(c > 0)) return std::numeric_limits<double>::quiet_NaN();
    return a - da / (2.0 * c);
  }
};

}  // namespace ndvm

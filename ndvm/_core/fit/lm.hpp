// Levenberg-Marquardt over S starts at once (FitDriver): MINPACK's lmder trust region per start,
// reading the per-lane Jacobian rows; lm_both runs scaling "both" as two lanes per start.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "fit/driver.hpp"

namespace ndvm {

class LmFit final : public FitDriver {
 public:
  // starts from `unscaled_from` on run without column scaling (see lm_both)
  LmFit(FitRequest& rq, uint32_t unscaled_from) : FitDriver(rq, unscaled_from) {}

 private:
  // MINPACK's lmder (Moré 1978): a trust region of radius delta in the norm ||D p||, D the
  // running maximum of the Jacobian's column norms; the step solves the damped least-squares
  // problem through a QR of J and an SVD of R D^-1; ftol/xtol/gtol with MINPACK's meanings.
  // Departures: a trial that is not finite, or that makes a parameter's Jacobian column vanish
  // (a saturated exponential: a flat region the fit could not leave), is rejected like a bad
  // step; bounds hold a variable that sits on one and is pushed outwards, and clip the others;
  // a start about to stop (but for gtol) with a parameter its linear model cannot see runs a
  // plateau probe first (start_plateau_probe). An unscaled start (scaling "none", or the second
  // lane of "both", lm_both) keeps D = 1 (but for blamed parameters, see judge) and shrinks
  // its radius after a rejected step to 1/4 of the step, as scipy's trf: the two regions cross
  // ridges differently, and which side of a ridge a shrunk step lands on is luck. Measured on
  // bench/fit_quality.py's 51 fits: scaled 41, unscaled 42 (the 41 and Beale from 100 x0),
  // both 42; but the unscaled region with a shrink to 0.2 / 0.3 / 0.5 of the step solves 40 /
  // 38 / 38 (losing Meyer 10x or 100x, Kowalik-Osborne 100x, Rosenbrock 100x), so the default
  // keeps both lanes, which never loses a fit that MINPACK's region solves. Geodesic
  // acceleration (Transtrum-Sethna 2012, r_vv by a finite difference at x + 0.1 v, accepted
  // when 2|a|/|v| <= 0.75) was tried and measured there: 39 of 51 (37 when only damped steps
  // are accelerated), Beale 100 x0 not solved, 60% more evaluations; it is not used.
  // At most this many trials per plateau probe, and this many probes per start (see below).
  static constexpr int kPlateauTrials = 8, kPlateauProbes = 4;
  static constexpr int kUnseenGrowths = 40;  // (a start's region grown 1e40-fold at most)
  struct LmState {
    lm::Factor F;
    std::vector<double> D, z, J, r, cn, col0, acn, p, dp, w;  // cn: J's column norms
    std::vector<double> blind;  // plateau probe: descent direction of each blind parameter, or 0
    std::vector<uint8_t> held;
    double delta = 0, par = 0, fnorm = 0, xnorm = 0, gnorm = 0, pnorm = 0, prered = 0,
           dirder = 0;
    int probe = 0, probes_left = kPlateauProbes;  // probe: the current trial's index (1..), or 0
    int unseen = 0;  // trust regions grown after steps too short for the loss to show (judge)
    int8_t why = kBudget;  // the stop reason that a plateau probe holds back
    bool factored = false, first = true, scaled = false;
    bool unscaled = false;  // the lane without column scaling (see lm())

    // A fresh state that keeps this one's buffers (their contents are assigned before use).
    void reset() {
      LmState m;
      m.F = std::move(F);
      for (auto v : {&LmState::D, &LmState::z, &LmState::J, &LmState::r, &LmState::cn,
                     &LmState::col0, &LmState::acn, &LmState::p, &LmState::dp, &LmState::w,
                     &LmState::blind})
        m.*v = std::move(this->*v);
      m.held = std::move(held);
      *this = std::move(m);
    }
  };
  // Per-thread buffers kept between fits (FitScratch): the starts' states and the trial's, and
  // refactor's QR scratch: A, the copy of a start's Jacobian the QR overwrites, and the QR's
  // reflector and Q^T f, one set for every start, whose refactors run one after the other (they
  // were each start's own, nothing reading them after its QR: on 10^6 rows 512 MB of ndvm.fit's
  // 2.1 GB for 8 starts, and 16 MB a start)
  struct LmScratch {
    std::vector<LmState> st;
    std::vector<double> ut, rt, Jt, cnt, A;
    lm::QrWork qr;

    static LmScratch& here() {
      thread_local LmScratch s;
      return s;
    }
  };

 public:
  // The thread's LM buffers released when a fit made them huge: ``bytes`` (keep_small).
  static void trim(size_t bytes) { keep_small(LmScratch::here(), bytes); }

 private:
  // column norms into cn; false if any entry is not finite.
  bool copy_jacobian(uint32_t s, const std::vector<double>& u, double* J, double* cn) const {
    bool ok = true;
    for (size_t p = 0; p < P_; ++p) {
      const double* src = jac_[p].data() + size_t(s) * N_;
      double* dst = J + p * N_;
      if (is_log(p)) {
        double scale = std::exp(u[p * S_ + s]);
        for (uint32_t n = 0; n < N_; ++n) dst[n] = src[n] * scale;
      } else {
        std::copy(src, src + N_, dst);
      }
      cn[p] = lm::enorm(dst, N_);
      ok = ok && std::isfinite(cn[p]);
    }
    return ok;
  }

  void optimize() override {
    const double radius0 = 100.0;  // MINPACK's initial radius: factor * ||D x0||
    LmScratch& sc = LmScratch::here();
    std::vector<LmState>& st = sc.st;
    std::vector<double>&ut = sc.ut, &rt = sc.rt, &Jt = sc.Jt, &cnt = sc.cnt;
    if (st.size() < S_) st.resize(S_);
    ut = u_;
    rt.resize(N_);
    Jt.resize(size_t(N_) * P_);
    cnt.resize(P_);
    struct Trim {  // (after the fit, however it ends)
      size_t bytes;
      ~Trim() { trim(bytes); }
    } trim_after{(size_t(N_) * P_ * (S_ + 2) + 2 * size_t(N_)) * sizeof(double)};
    evaluate(u_, kJac);
    for (uint32_t s = 0; s < S_; ++s) {
      LmState& m = st[s];
      m.reset();
      m.F.resize(P_);
      m.unscaled = s >= unscaled_from_;
      m.D.assign(P_, 1.0);
      m.z.assign(P_, 0.0);
      m.p.assign(P_, 0.0);
      m.dp.assign(P_, 0.0);
      m.w.assign(P_, 0.0);
      m.acn.assign(P_, 0.0);
      m.held.assign(P_, 0);
      m.blind.assign(P_, 0.0);
      m.r.assign(N_, 0.0);
      m.J.assign(size_t(N_) * P_, 0.0);
      m.cn.assign(P_, 0.0);
      m.fnorm = residual_norm(s, m.r.data());
      if (!std::isfinite(m.fnorm) || !copy_jacobian(s, u_, m.J.data(), m.cn.data())) {
        retired_[s] = 1;
        continue;
      }
      m.col0 = m.cn;
      record(0, s, loss_[s]);
      keep_best(s, u_, loss_[s]);
    }
    for (int k = 1;; ++k) {
      bool any = false;
      for (uint32_t s = 0; s < S_; ++s) {
        if (!live(s)) continue;
        LmState& m = st[s];
        if (m.probe) {
          probe_trial(s, m, ut);
          any = true;
          continue;
        }
        if (!m.factored) refactor(s, m, radius0);
        if (!live(s)) continue;
        propose(s, m, ut);
        any = true;
      }
      if (!any || k >= rq_.budget) break;  // budget: the remaining live starts keep kBudget
      evaluate(ut, kJac);
      for (uint32_t s = 0; s < S_; ++s)
        if (live(s) && st[s].probe) probe_judge(s, st[s], ut, rt, Jt, cnt);
        else if (live(s)) judge(s, st[s], ut, rt, Jt, cnt);
      for (uint32_t s = 0; s < S_; ++s) {
        if (retired_[s]) continue;
        LmState& m = st[s];
        double f = m.fnorm / std::sqrt(double(N_));
        record(k, s, f * f);
      }
    }
    for (uint32_t s = 0; s < S_; ++s) {
      if (retired_[s]) continue;
      LmState& m = st[s];
      // a column that vanished during the fit; or every column zero while the residuals are not
      // (started where the model no longer depends on any parameter: a zero gradient, no minimum)
      bool flat = m.fnorm > 0.0;
      for (size_t p = 0; p < P_; ++p) flat = flat && m.cn[p] == 0.0;
      for (size_t p = 0; p < P_; ++p) {
        if (m.cn[p] == 0.0 && (m.col0[p] > 0.0 || flat)) {
          flags_[p * S_ + s] |= 2;
          if (status_[s] > 0) status_[s] = kDegenerate;
        }
      }
      if (rq_.uncertainty) {
        // covariance in external coordinates: undo the chain rule of positive parameters
        for (size_t p = 0; p < P_; ++p)
          if (is_log(p)) {
            double x = std::exp(u_[p * S_ + s]);
            for (uint32_t n = 0; n < N_; ++n) m.J[p * N_ + n] /= x;
          }
        write_covariance(s, m.J.data(), m.fnorm);
      }
    }
  }

  // QR and SVD at start s's current point, the gradient test, and the column scaling.
  void refactor(uint32_t s, LmState& m, double radius0) {
    LmScratch& sc = LmScratch::here();
    std::vector<double>& A = sc.A;
    A = m.J;
    for (size_t p = 0; p < P_; ++p) {
      m.acn[p] = m.cn[p];
      m.held[p] = 0;
      if (!bounded()) continue;
      double up = u_[p * S_ + s], g = 0;
      for (uint32_t n = 0; n < N_; ++n) g += m.J[p * N_ + n] * m.r[n];
      // held: on a bound, with the descent direction -g pointing out of the box
      m.held[p] = (up <= lo_[p] && g > 0) || (up >= hi_[p] && g < 0);
      if (m.held[p]) {
        std::fill(A.begin() + p * N_, A.begin() + (p + 1) * N_, 0.0);
        m.acn[p] = 0.0;
      }
    }
    m.F.qr(A.data(), N_, m.r.data(), sc.qr);
    m.gnorm = 0.0;
    if (m.fnorm != 0.0)
      for (size_t j = 0; j < P_; ++j) {
        if (m.acn[j] == 0.0) continue;
        double sum = 0.0;
        for (size_t i = 0; i <= j; ++i) sum += m.F.R[i * P_ + j] * (m.F.qtf[i] / m.fnorm);
        m.gnorm = std::max(m.gnorm, std::fabs(sum / m.acn[j]));
      }
    if (!m.scaled) {
      // MINPACK's start: D from the column norms, radius factor * ||D x0|| (factor when x0 = 0);
      // here a zero component counts as 1, so that a start such as (0, 100) does not get a
      // radius set by the one parameter that happens to be non-zero
      m.scaled = true;
      for (size_t p = 0; p < P_; ++p) {
        m.D[p] = m.acn[p] > 0 && !m.unscaled ? m.acn[p] : 1.0;
        double up = u_[p * S_ + s];
        m.w[p] = m.D[p] * (up != 0.0 ? up : 1.0);
      }
      m.delta = radius0 * lm::enorm(m.w.data(), P_);
      m.xnorm = scaled_norm(s, m, u_);
    }
    if (m.gnorm <= rq_.gtol) {
      stop(s, kGtol);
      return;
    }
    if (!m.unscaled)
      for (size_t p = 0; p < P_; ++p) m.D[p] = std::max(m.D[p], m.acn[p]);
    m.F.svd(m.D.data());
    m.factored = true;
  }

  double scaled_norm(uint32_t s, LmState& m, const std::vector<double>& u) const {
    for (size_t p = 0; p < P_; ++p) m.w[p] = m.D[p] * u[p * S_ + s];
    return lm::enorm(m.w.data(), P_);
  }

  // The step for the current radius: trial point into ut, with its predicted reduction.
  void propose(uint32_t s, LmState& m, std::vector<double>& ut) {
    m.par = m.F.lmpar(m.delta, m.par, N_, m.z.data());
    bool clipped = false;
    std::vector<double>& p = m.p;
    std::vector<double>& dp = m.dp;
    std::vector<double>& w = m.w;
    for (size_t j = 0; j < P_; ++j) {
      double acc = 0.0;  // D p = V z
      for (size_t i = 0; i < P_; ++i) acc += m.F.v(j, i) * m.z[i];
      double step = m.held[j] ? 0.0 : acc / m.D[j];
      double u0 = u_[j * S_ + s], v = std::min(std::max(u0 + step, lo_[j]), hi_[j]);
      clipped = clipped || v != u0 + step;
      ut[j * S_ + s] = v;
      p[j] = v - u0;
      dp[j] = m.D[j] * p[j];
    }
    m.pnorm = lm::enorm(dp.data(), P_);
    if (m.first) m.delta = std::min(m.delta, m.pnorm);
    // R p / fnorm, for the predicted reduction of the linear model
    for (size_t i = 0; i < P_; ++i) {
      double acc = 0.0;
      for (size_t j = i; j < P_; ++j) acc += m.F.R[i * P_ + j] * p[j];
      w[i] = acc / m.fnorm;
    }
    double t1 = lm::enorm(w.data(), P_);
    if (!clipped && !std::any_of(m.held.begin(), m.held.end(), [](uint8_t h) { return h; })) {
      double t2 = std::sqrt(m.par) * m.pnorm / m.fnorm;
      m.prered = t1 * t1 + 2.0 * t2 * t2;
      m.dirder = -(t1 * t1 + t2 * t2);
    } else {  // a clipped step: the model's reduction along the step actually taken
      double dot = 0.0;
      for (size_t i = 0; i < P_; ++i) dot += w[i] * (m.F.qtf[i] / m.fnorm);
      m.dirder = dot;
      m.prered = -(2.0 * dot + t1 * t1);
    }
  }

  // The ratio test of the trial at ut: accept or reject, update the radius, run the stop tests.
  void judge(uint32_t s, LmState& m, std::vector<double>& ut, std::vector<double>& rt,
             std::vector<double>& Jt, std::vector<double>& cnt) {
    double fnorm1 = residual_norm(s, rt.data());
    bool bad = !std::isfinite(fnorm1) || !copy_jacobian(s, ut, Jt.data(), cnt.data());
    // A step that took a parameter where the model no longer depends on it (its column
    // vanished), or that made the model non-finite while moving one parameter by more than its
    // own magnitude, is blamed on that parameter: its scale D_j is raised so that it may move a
    // tenth as far (and at most by its magnitude) next time, leaving the radius to the others.
    bool blamed = false;
    auto blame = [&](size_t p) {
      double allowed = std::min(0.1 * std::fabs(m.p[p]), std::max(std::fabs(u_[p * S_ + s]), 1.0));
      m.D[p] = std::max(m.D[p], m.delta / allowed);
      blamed = true;
    };
    if (!bad) {
      for (size_t p = 0; p < P_; ++p)
        if (!m.held[p] && m.acn[p] > 0 && cnt[p] < 1e-12 * m.acn[p] && m.p[p] != 0.0) blame(p);
    } else {
      size_t worst = P_;
      double most = 1.0;
      for (size_t p = 0; p < P_; ++p) {
        double rel = std::fabs(m.p[p]) / std::max(std::fabs(u_[p * S_ + s]), 1.0);
        if (rel > most) {
          most = rel;
          worst = p;
        }
      }
      if (worst < P_) blame(worst);
    }
    if (blamed) {
      m.F.svd(m.D.data());
      m.xnorm = scaled_norm(s, m, u_);
      m.par = 0.0;
      return;
    }
    if (!bad && std::fabs(fnorm1 - m.fnorm) <= 100.0 * lm::kEps * m.fnorm && m.par > 0.0 &&
        m.prered > 0.0 && m.prered <= 100.0 * lm::kEps && m.unseen < kUnseenGrowths) {
      // A step the trust region cut short whose predicted relative reduction is below the
      // rounding of the residuals' norm, and that left it as it was within that rounding (100
      // eps): the region was too small to see anything, not the step wrong (a * x fitted to
      // 3e17 x from a start near 0: the norm ~1e18 does not change in its last bit for a step of
      // 4 in a, and the shrunk region gave "no further progress"). The region grows tenfold instead, nothing else
      // changes, until the loss can show the model's prediction.
      ++m.unseen;
      m.delta = 10.0 * std::max(m.delta, m.pnorm);
      m.par = 0.0;
      return;
    }
    double actred = -1.0;
    if (!bad && 0.1 * fnorm1 < m.fnorm) actred = 1.0 - (fnorm1 / m.fnorm) * (fnorm1 / m.fnorm);
    double ratio = m.prered != 0.0 ? actred / m.prered : 0.0;
    if (bad) ratio = 0.0;
    if (ratio <= 0.25) {
      double temp = actred >= 0 ? 0.5 : 0.5 * m.dirder / (m.dirder + 0.5 * actred);
      if (bad || 0.1 * fnorm1 >= m.fnorm || !(temp >= 0.1)) temp = 0.1;
      m.delta = temp * std::min(m.delta, m.pnorm / 0.1);
      if (m.unscaled) {  // scipy trf's rule: a quarter of the rejected step
        temp = 0.25;
        m.delta = temp * m.pnorm;
      }
      m.par /= temp;
    } else if (m.par == 0.0 || ratio >= 0.75) {
      m.delta = m.pnorm / 0.5;
      m.par *= 0.5;
    }
    if (ratio >= 1e-4) {
      for (size_t p = 0; p < P_; ++p) u_[p * S_ + s] = ut[p * S_ + s];
      m.r.swap(rt);
      m.J.swap(Jt);
      m.cn.swap(cnt);
      m.fnorm = fnorm1;
      m.xnorm = scaled_norm(s, m, u_);
      m.factored = false;
      m.first = false;
      keep_best(s, u_, loss_[s]);
    }
    int8_t why = 0;
    // A step the trust region cut short (par > 0) that the linear model predicted well is
    // progress however small its relative reduction: the region doubles for the next one. So it
    // meets no ftol and no machine-precision stop: a target near 1e11 (a * x fitted to 2e11 x)
    // stopped after one such step from a start near 0, "no progress", a = 3.8.
    const bool cut_short = m.par > 0.0 && ratio >= 0.75 && !bad;
    if (!cut_short && std::fabs(actred) <= rq_.ftol && m.prered <= rq_.ftol && 0.5 * ratio <= 1.0)
      why = kFtol;
    if (m.delta <= rq_.tol * m.xnorm) why = why == kFtol ? kFtolXtol : kXtol;
    if (why == kXtol && bad) why = kNonFinite;
    if (why == kFtol && !false_ftol_check(s, m)) why = kNoProgress;
    if (!why && !cut_short &&
        ((std::fabs(actred) <= lm::kEps && m.prered <= lm::kEps && 0.5 * ratio <= 1.0) ||
         m.delta <= lm::kEps * m.xnorm || m.gnorm <= lm::kEps))
      why = kNoProgress;
    if (why && why != kGtol && start_plateau_probe(s, m, why)) return;
    if (why) stop(s, why);
  }

  // Plateau probe. The trust region's linear model cannot see a parameter whose Jacobian column
  // is below the rounding level of the others (a saturated exponential: exp(-t x2) at x2 = 1000
  // is 1e-44 of the other columns), so a fit that collapsed its trust region there may sit on a
  // plateau, not at a minimum: the loss still falls along that parameter, only too slowly for
  // the linear model (Moré-Garbow-Hillstrom box3d from 100 x0 stalls at (0.61, 1000, 1.32), and
  // its loss falls monotonically to 0 as x2 goes from 1000 to 10; the trust region either
  // collapses, "no progress", or meets ftol/xtol on the parameters it can see). Before such a
  // start stops for any reason but gtol (which the blind columns' cosines must meet too), every
  // blind parameter whose gradient still has a sign is moved along its descent direction by
  // growing fractions of its magnitude (1/2, 3/4, 7/8, ... of the way toward zero, or 1, 2, 4,
  // ... times it away from zero); the first trial that lowers the loss and where a blind column
  // is above the rounding level again (off the plateau, not further onto it) is taken, and the
  // trust region restarts there as at a new start. No such trial: the start stops with the
  // reason it had (a parameter's best value may lie at infinity: Bard's local minimum with x2,
  // x3 -> -inf, or b in a + exp(-b x) fitted to a constant).
  bool start_plateau_probe(uint32_t s, LmState& m, int8_t why) {
    if (m.probes_left <= 0) return false;
    double big = 0.0;
    for (size_t p = 0; p < P_; ++p) big = std::max(big, m.cn[p]);
    bool any = false;
    for (size_t p = 0; p < P_; ++p) {
      m.blind[p] = 0.0;
      if (m.cn[p] > lm::kEps * big) continue;
      double g = 0.0;  // d (|r|^2 / 2) / d u_p, by the summands' signs only if they underflow
      for (uint32_t n = 0; n < N_; ++n) g += m.J[p * N_ + n] * m.r[n];
      if (g == 0.0 || !std::isfinite(g)) continue;
      double up = u_[p * S_ + s];
      if ((g > 0 && up <= lo_[p]) || (g < 0 && up >= hi_[p])) continue;  // held by a bound
      m.blind[p] = g > 0 ? -1.0 : 1.0;
      any = true;
    }
    if (!any) return false;
    --m.probes_left;
    m.probe = 1;
    m.why = why;
    return true;
  }

  void probe_trial(uint32_t s, LmState& m, std::vector<double>& ut) {
    for (size_t p = 0; p < P_; ++p) {
      double up = u_[p * S_ + s], v = up;
      if (m.blind[p] != 0.0) {
        double mag = std::max(std::fabs(up), 1.0);
        bool toward_zero = m.blind[p] * up < 0.0;
        double frac = toward_zero ? 1.0 - std::ldexp(1.0, -m.probe) : std::ldexp(1.0, m.probe - 1);
        v = std::min(std::max(up + m.blind[p] * frac * mag, lo_[p]), hi_[p]);
      }
      ut[p * S_ + s] = v;
    }
  }

  void probe_judge(uint32_t s, LmState& m, std::vector<double>& ut, std::vector<double>& rt,
                   std::vector<double>& Jt, std::vector<double>& cnt) {
    double fnorm1 = residual_norm(s, rt.data());
    bool ok = std::isfinite(fnorm1) && copy_jacobian(s, ut, Jt.data(), cnt.data());
    double big = 0.0;
    for (size_t p = 0; p < P_; ++p) big = std::max(big, cnt[p]);
    bool seen = false;  // a blind parameter's column is above the others' rounding level again
    for (size_t p = 0; p < P_; ++p) seen = seen || (m.blind[p] != 0.0 && cnt[p] > lm::kEps * big);
    if (ok && seen && fnorm1 < m.fnorm) {  // off the plateau: restart the trust region here
      for (size_t p = 0; p < P_; ++p) u_[p * S_ + s] = ut[p * S_ + s];
      m.r.swap(rt);
      m.J.swap(Jt);
      m.cn.swap(cnt);
      m.fnorm = fnorm1;
      keep_best(s, u_, loss_[s]);
      std::fill(m.D.begin(), m.D.end(), 1.0);
      m.par = 0.0;
      m.probe = 0;
      m.factored = false;
      m.first = true;
      m.scaled = false;
      return;
    }
    if (++m.probe > kPlateauTrials) {
      m.probe = 0;
      stop(s, m.why);
    }
  }

  // An ftol stop is a convergence only where the residuals are nearly orthogonal to every
  // Jacobian column (MINPACK's gnorm, here at most 1e-2): a trust region that collapsed on a
  // badly nonlinear model also makes the relative reductions small, far from any minimum.
  bool false_ftol_check(uint32_t s, LmState& m) {
    if (!m.factored) {
      refactor(s, m, 0.0);  // (the radius is set by now)
      if (done_[s]) return true;  // gtol met at the point
    }
    return m.gnorm <= 1e-2;
  }
};

// LM with scaling "both": every start runs twice, as lanes of one fit of 2 S starts, with
// MINPACK's column scaling (starts 0..S-1) and without (S..2S-1); each start keeps the lane
// of lower loss (on a tie, the one that converged), with that lane's point, status, history,
// covariance and flags. n_evals counts the batched evaluations of both lanes together.
inline void lm_both(FitRequest& rq) {
  const uint32_t S = rq.S, S2 = 2 * S;
  const size_t P = rq.param_binding.size(), rows = size_t(rq.budget);
  FitRequest sub = rq;
  sub.S = S2;
  sub.scaling = Scaling::Jac;
  sub.n_evals = 0;
  struct Lanes {  // per-thread buffers kept between fits (FitScratch)
    std::vector<double> params, losses, history, cov, se;
    std::vector<uint8_t> conv, flags;
    std::vector<int8_t> status;
  };
  thread_local Lanes l;
  std::vector<double>&params = l.params, &losses = l.losses, &history = l.history, &cov = l.cov,
                      &se = l.se;
  std::vector<uint8_t>&conv = l.conv, &flags = l.flags;
  std::vector<int8_t>& status = l.status;
  params.resize(P * S2);
  losses.resize(S2);
  history.resize(rows * S2);
  conv.resize(S2);
  flags.resize(S2 * P);
  status.resize(S2);
  for (size_t p = 0; p < P; ++p)
    for (uint32_t s = 0; s < S; ++s)
      params[p * S2 + s] = params[p * S2 + S + s] = rq.params[p * S + s];
  sub.params = params.data();
  sub.losses = losses.data();
  sub.history = history.data();
  sub.converged = conv.data();
  sub.status = status.data();
  sub.flags = flags.data();
  if (rq.cov) cov.resize(S2 * P * P), sub.cov = cov.data();
  if (rq.stderr_) se.resize(S2 * P), sub.stderr_ = se.data();
  LmFit(sub, S).run();
  rq.n_evals += sub.n_evals;
  for (uint32_t s = 0; s < S; ++s) {
    uint32_t c = S + s;
    uint32_t b = losses[c] < losses[s] || (losses[c] == losses[s] && conv[c] && !conv[s]) ? c : s;
    for (size_t p = 0; p < P; ++p) rq.params[p * S + s] = params[p * S2 + b];
    for (size_t k = 0; k < rows; ++k) rq.history[k * S + s] = history[k * S2 + b];
    rq.losses[s] = losses[b];
    rq.converged[s] = conv[b];
    if (rq.status) rq.status[s] = status[b];
    if (rq.flags) std::copy_n(flags.begin() + b * P, P, rq.flags + s * P);
    if (rq.cov) std::copy_n(cov.begin() + b * P * P, P * P, rq.cov + s * P * P);
    if (rq.stderr_) std::copy_n(se.begin() + b * P, P, rq.stderr_ + s * P);
  }
}

}  // namespace ndvm

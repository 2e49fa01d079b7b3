// Small dense linear algebra for least squares with P parameters and N residuals (P small): a
// Householder QR of the N x P Jacobian (J^T J is never formed, so its condition number is never
// squared and nothing overflows while J is finite), a one-sided Jacobi SVD of the scaled P x P
// triangle, the Levenberg-Marquardt step of a given trust-region radius (Moré 1978, solved through
// the SVD), and the covariance of the parameters at a least-squares optimum.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace ndvm::lm {

constexpr double kEps = std::numeric_limits<double>::epsilon();

// sum a[i] b[i] with four partial sums (so that the loop vectorizes without reassociation flags)
inline double dot(const double* __restrict a, const double* __restrict b, size_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// Euclidean norm of x[0], x[stride], ... (n terms) without overflow or harmful underflow: the
// plain sum of squares when it is safely inside the range, else a rescaled second pass.
inline double enorm(const double* x, size_t n, size_t stride = 1) {
  double s = 0.0;
  if (stride == 1) s = dot(x, x, n);
  else
    for (size_t i = 0; i < n; ++i) s += x[i * stride] * x[i * stride];
  if (s > 1e-280 && s < 1e280) return std::sqrt(s);
  if (std::isnan(s)) return s;
  double big = 0.0;
  for (size_t i = 0; i < n; ++i) big = std::max(big, std::fabs(x[i * stride]));
  if (big == 0.0 || !std::isfinite(big)) return big;
  s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double t = x[i * stride] / big;
    s += t * t;
  }
  return big * std::sqrt(s);
}

// A QR's scratch, N doubles each: its reflector and Q^T f (the caller's, kept where its other
// buffers are: one for every start, whose QRs run one after the other).
struct QrWork {
  std::vector<double> work, u;
};

// The factorization of one start's problem at its current point.
struct Factor {
  size_t P = 0;
  std::vector<double> R;      // P x P upper triangle, row-major (Q^T J)
  std::vector<double> qtf;    // first P entries of Q^T f
  std::vector<double> W, V;   // B = R D^-1 = W V^T, W's columns orthogonal (W = U Sigma); by columns
  std::vector<double> sigma;  // singular values of B (column norms of W)
  std::vector<double> gt;     // W^T qtf: the scaled gradient B^T qtf in V's coordinates

  void resize(size_t p) {
    P = p;
    R.assign(p * p, 0.0);
    qtf.assign(p, 0.0);
    W.assign(p * p, 0.0);
    V.assign(p * p, 0.0);
    sigma.assign(p, 0.0);
    gt.assign(p, 0.0);
  }

  // QR of A (N x P, column j at A + j*N; overwritten) applied to f [N]: R and qtf = (Q^T f)[:P].
  // Each reflector is normalized by its column's norm, so entries near the overflow threshold
  // never get squared.
  void qr(double* A, size_t N, const double* f, QrWork& w) {
    std::vector<double>&work = w.work, &u = w.u;
    work.assign(f, f + N);
    u.resize(N);
    std::fill(R.begin(), R.end(), 0.0);
    size_t K = std::min(N, P);
    double* __restrict uj = u.data();
    for (size_t j = 0; j < K; ++j) {
      double* __restrict a = A + j * N;
      double alpha = enorm(a + j, N - j);
      if (alpha == 0.0 || !std::isfinite(alpha)) continue;
      if (a[j] > 0) alpha = -alpha;
      // H = I - 2 u u^T / (u^T u) with u = (a[j:] - alpha e_1) / |alpha| maps a[j:] to alpha e_1;
      // u^T u = 2 (1 - a_j / alpha), between 2 and 4 since a_j and alpha have opposite signs
      double inv = 1.0 / std::fabs(alpha);
      double scale = 1.0 / (1.0 - a[j] / alpha);  // 2 / u^T u
      for (size_t i = j; i < N; ++i) uj[i] = a[i] * inv;
      uj[j] = (a[j] - alpha) * inv;
      for (size_t k = j + 1; k <= P; ++k) {
        double* __restrict c = k < P ? A + k * N : work.data();
        double t = scale * dot(uj + j, c + j, N - j);
        for (size_t i = j; i < N; ++i) c[i] -= t * uj[i];
      }
      a[j] = alpha;
    }
    for (size_t i = 0; i < K; ++i) {
      for (size_t j = i; j < P; ++j) R[i * P + j] = A[j * N + i];
      qtf[i] = work[i];
    }
    for (size_t i = K; i < P; ++i) qtf[i] = 0.0;
  }

  // V's entry (row, column); W and V are stored by columns.
  double v(size_t row, size_t col) const { return V[col * P + row]; }

  // SVD of B = R diag(1/d) by one-sided Jacobi rotations of its columns; also gt = W^T qtf.
  void svd(const double* d) {
    for (size_t j = 0; j < P; ++j)
      for (size_t i = 0; i < P; ++i) {
        W[j * P + i] = R[i * P + j] / d[j];
        V[j * P + i] = i == j ? 1.0 : 0.0;
      }
    for (int sweep = 0; sweep < 60; ++sweep) {
      bool rotated = false;
      for (size_t p = 0; p + 1 < P; ++p)
        for (size_t q = p + 1; q < P; ++q) {
          double* __restrict wp = W.data() + p * P;
          double* __restrict wq = W.data() + q * P;
          double al = 0, be = 0, ga = 0;
          for (size_t i = 0; i < P; ++i) {
            al += wp[i] * wp[i];
            be += wq[i] * wq[i];
            ga += wp[i] * wq[i];
          }
          if (ga == 0.0 || std::fabs(ga) <= kEps * std::sqrt(al * be)) continue;
          rotated = true;
          double zeta = (be - al) / (2.0 * ga);
          double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
          double c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
          double* __restrict vp = V.data() + p * P;
          double* __restrict vq = V.data() + q * P;
          for (size_t i = 0; i < P; ++i) {
            double x = wp[i], y = wq[i];
            wp[i] = c * x - s * y;
            wq[i] = s * x + c * y;
            x = vp[i];
            y = vq[i];
            vp[i] = c * x - s * y;
            vq[i] = s * x + c * y;
          }
        }
      if (!rotated) break;
    }
    for (size_t j = 0; j < P; ++j) {
      const double* w = W.data() + j * P;
      sigma[j] = enorm(w, P);
      double g = 0.0;
      for (size_t i = 0; i < P; ++i) g += w[i] * qtf[i];
      gt[j] = g;
    }
  }

  // Singular values at or below this count as zero (numerical rank).
  double rank_floor(size_t N) const {
    double smax = 0.0;
    for (double s : sigma) smax = std::max(smax, s);
    return smax * kEps * double(std::max(N, P));
  }

  // z = V^T D p for the damped step of parameter `par`: z_i = -gt_i / (sigma_i^2 + par);
  // directions with a zero singular value take no step. Returns ||z|| = ||D p||.
  double step(double par, double floor, double* z) const {
    for (size_t i = 0; i < P; ++i) {
      double s = sigma[i];
      z[i] = s > floor || par > 0.0 ? -gt[i] / (s * s + par) : 0.0;
    }
    return enorm(z, P);
  }

  // Moré's Levenberg-Marquardt parameter: par >= 0 with ||D p|| within 10% of delta, or par = 0
  // when the Gauss-Newton step is already inside 1.1 delta. z receives V^T D p.
  double lmpar(double delta, double par, size_t N, double* z) const {
    double floor = rank_floor(N);
    double dn = step(0.0, floor, z);
    if (dn <= 1.1 * delta) return 0.0;
    double gnorm = enorm(gt.data(), P);
    double paru = gnorm / delta;  // at par = paru, ||z|| <= delta
    double parl = 0.0;
    if (!(paru > 0) || !std::isfinite(paru)) return 0.0;
    if (!(par > parl && par < paru)) par = std::max(1e-3 * paru, 1e-300);
    for (int it = 0; it < 30; ++it) {
      dn = step(par, floor, z);
      double phi = dn - delta;
      if (std::fabs(phi) <= 0.1 * delta) break;
      if (phi > 0) parl = std::max(parl, par);
      else paru = std::min(paru, par);
      // Newton on 1/||z(par)|| - 1/delta, which is nearly linear in par
      double dsum = 0.0;
      for (size_t i = 0; i < P; ++i) dsum += z[i] * z[i] / (sigma[i] * sigma[i] + par);
      double next = par + (phi / delta) * (dn * dn / dsum);
      if (!(next > parl && next < paru) || !std::isfinite(next))
        next = parl > 0 ? std::sqrt(parl * paru) : 1e-3 * paru;
      if (next == par) break;
      par = next;
    }
    return par;
  }
};

// Covariance and standard errors of the parameters at a least-squares point from its Jacobian J
// (N x P, column j at J + j*N; overwritten) and residual sum of squares: sigma^2 (J^T J)^-1 with
// sigma^2 = rss / (N - P), as scipy.optimize.curve_fit's pcov. A parameter that the data cannot
// determine (a zero column, or a direction of J's null space) gets an infinite variance, NaN
// covariances, and flag 1. cov [P*P] and stderr [P] are outputs.
inline void covariance(double* J, size_t N, size_t P, double rss, double* cov, double* stderr_,
                       unsigned char* flags) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> d(P), zeros(N, 0.0);
  for (size_t j = 0; j < P; ++j) {
    d[j] = enorm(J + j * N, N);
    flags[j] = 0;
  }
  bool finite = std::isfinite(rss);
  for (size_t j = 0; j < P; ++j) finite = finite && std::isfinite(d[j]);
  if (!finite) {
    for (size_t k = 0; k < P * P; ++k) cov[k] = nan;
    for (size_t j = 0; j < P; ++j) stderr_[j] = nan;
    return;
  }
  Factor F;
  F.resize(P);
  QrWork w;
  F.qr(J, N, zeros.data(), w);
  std::vector<double> dd(P);
  for (size_t j = 0; j < P; ++j) dd[j] = d[j] > 0 ? d[j] : 1.0;
  F.svd(dd.data());
  double floor = F.rank_floor(N);
  std::vector<unsigned char> bad(P, 0);
  for (size_t j = 0; j < P; ++j)
    if (d[j] == 0.0) bad[j] = 1;
  for (size_t i = 0; i < P; ++i) {
    if (F.sigma[i] > floor && F.sigma[i] > 0) continue;
    for (size_t j = 0; j < P; ++j)
      if (std::fabs(F.v(j, i)) > 1e-6) bad[j] = 1;
  }
  double s2 = N > P ? rss / double(N - P) : inf;
  double s = std::sqrt(s2);
  for (size_t j = 0; j < P; ++j) {
    flags[j] = bad[j];
    for (size_t k = 0; k < P; ++k) {
      if (bad[j] || bad[k]) {
        cov[j * P + k] = j == k ? inf : nan;
        continue;
      }
      double acc = 0.0;  // (V Sigma^-2 V^T)_jk over the nonzero singular values
      for (size_t i = 0; i < P; ++i)
        if (F.sigma[i] > floor && F.sigma[i] > 0)
          acc += F.v(j, i) * F.v(k, i) / (F.sigma[i] * F.sigma[i]);
      cov[j * P + k] = s2 * acc / (dd[j] * dd[k]);
      if (j == k) stderr_[j] = s * std::sqrt(acc) / dd[j];
    }
    if (bad[j]) stderr_[j] = inf;
  }
}

}  // namespace ndvm::lm

// The ceiling for kalman2d_T80: the same 2x2 Kalman-filter negative log likelihood written by
// hand as straight-line C++, with forward-mode derivatives in q and r (dual numbers carrying two
// tangents), one lane after another. No interpreter, no tape.
// Usage: kalman_hand OBS.txt LANES   (OBS.txt: "obs 80 2 v1 v2 ..."). Prints µs per call and
// the value and gradient of lane 0 (to check it against ndvm).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

struct D {  // value and derivatives with respect to q and r
  double v, dq, dr;
};
static inline D operator+(D a, D b) { return {a.v + b.v, a.dq + b.dq, a.dr + b.dr}; }
static inline D operator-(D a, D b) { return {a.v - b.v, a.dq - b.dq, a.dr - b.dr}; }
static inline D operator*(D a, D b) {
  return {a.v * b.v, a.dq * b.v + a.v * b.dq, a.dr * b.v + a.v * b.dr};
}
static inline D operator/(D a, D b) {
  double inv = 1.0 / b.v, y = a.v * inv;
  return {y, (a.dq - y * b.dq) * inv, (a.dr - y * b.dr) * inv};
}
static inline D dlog(D a) { return {std::log(a.v), a.dq / a.v, a.dr / a.v}; }
static inline D c(double x) { return {x, 0.0, 0.0}; }

static D nll(double qv, double rv, const double* obs, int T) {
  D q{qv, 1.0, 0.0}, r{rv, 0.0, 1.0};
  D x0 = c(0), x1 = c(0), p00 = c(1), p01 = c(0), p10 = c(0), p11 = c(1), L = c(0);
  for (int k = 0; k < T; ++k) {
    D a00 = p00 + q, a01 = p01, a10 = p10, a11 = p11 + q;       // Ppred
    D e0 = c(obs[2 * k]) - x0, e1 = c(obs[2 * k + 1]) - x1;     // innovation
    D s00 = a00 + r, s01 = a01, s10 = a10, s11 = a11 + r;       // S
    D det = s00 * s11 - s01 * s10;
    D i00 = s11 / det, i01 = c(0) - s01 / det, i10 = c(0) - s10 / det, i11 = s00 / det;
    D k00 = a00 * i00 + a01 * i10, k01 = a00 * i01 + a01 * i11;  // gain = Ppred S^-1
    D k10 = a10 * i00 + a11 * i10, k11 = a10 * i01 + a11 * i11;
    x0 = x0 + (k00 * e0 + k01 * e1);
    x1 = x1 + (k10 * e0 + k11 * e1);
    D m00 = c(1) - k00, m01 = c(0) - k01, m10 = c(0) - k10, m11 = c(1) - k11;
    p00 = m00 * a00 + m01 * a10;
    p01 = m00 * a01 + m01 * a11;
    p10 = m10 * a00 + m11 * a10;
    p11 = m10 * a01 + m11 * a11;
    D se0 = i00 * e0 + i01 * e1, se1 = i10 * e0 + i11 * e1;
    L = L + (dlog(det) + (e0 * se0 + e1 * se1));
  }
  return L;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OBS.txt LANES\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::string name;
  int rows, cols;
  in >> name >> rows >> cols;
  std::vector<double> obs(rows * cols);
  for (auto& v : obs) in >> v;
  int lanes = std::atoi(argv[2]);
  std::vector<double> q(lanes), r(lanes), val(lanes), gq(lanes), gr(lanes);
  for (int l = 0; l < lanes; ++l) {
    q[l] = 0.05 * (1.0 + 0.001 * l);
    r[l] = 0.1 * (1.0 + 0.001 * l);
  }
  auto once = [&] {
    for (int l = 0; l < lanes; ++l) {
      D out = nll(q[l], r[l], obs.data(), rows);
      val[l] = out.v;
      gq[l] = out.dq;
      gr[l] = out.dr;
    }
  };
  for (int i = 0; i < 10; ++i) once();
  int per = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) once();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 0.02) break;
    per *= 2;
  }
  std::vector<double> times;
  for (int k = 0; k < 7; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) once();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / per);
  }
  std::sort(times.begin(), times.end());
  std::printf("%.3f %.10g %.10g %.10g\n", times[3] * 1e6, val[0], gq[0], gr[0]);
  return 0;
}

// Linear algebra on lanes: the dense per-lane kernels (det, inverse), the forward op
// (Machine::linalg: inv, det, logdet, solve; 2x2 closed forms vectorized across lanes for the
// state-space case) and its adjoint rules for the reverse sweep (sweep.hpp). Matrices are
// row-major n x n, one element per payload.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "numeric.hpp"

namespace ndvm {

namespace detail {

// Gaussian elimination with partial pivoting of the row-major n x n matrix w, in place:
// visit(pivot, swapped) for each column's pivot in turn (swapped: its row was exchanged), until
// it returns false.
template <class W, class Visit>
void eliminate(W* w, uint32_t n, Visit&& visit) {
  for (uint32_t c = 0; c < n; ++c) {
    uint32_t p = c;
    for (uint32_t r = c + 1; r < n; ++r)
      if (std::fabs(w[r * n + c]) > std::fabs(w[p * n + c])) p = r;
    if (p != c)
      for (uint32_t j = 0; j < n; ++j) std::swap(w[c * n + j], w[p * n + j]);
    W piv = w[c * n + c];
    if (!visit(piv, p != c)) return;
    for (uint32_t r = c + 1; r < n; ++r) {
      W f = w[r * n + c] / piv;
      for (uint32_t j = c; j < n; ++j) w[r * n + j] -= f * w[c * n + j];
    }
  }
}

// Dense per-lane linear algebra on a row-major n x n matrix (partial pivoting).
template <class T>
T det_dense(const T* a, uint32_t n, T* work) {
  if (n == 1) return a[0];
  if (n == 2) return a[0] * a[3] - a[1] * a[2];
  if (n == 3)
    return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
           a[2] * (a[3] * a[7] - a[4] * a[6]);
  std::copy(a, a + n * n, work);
  T det = T(1);
  eliminate(work, n, [&](T piv, bool swapped) {
    if (swapped) det = -det;
    det *= piv;
    return piv != T(0);
  });
  return det;
}

// log(det a) as the sum of the pivots' log magnitudes, so that it neither overflows nor
// underflows where det does (10 I of 400 x 400: det 1e400, inf; logdet 921.03): NaN for a
// negative determinant (the log of one), -inf for a singular matrix. Any T, in double.
template <class T>
T logdet_dense(const T* a, uint32_t n, double* work) {
  std::copy(a, a + n * n, work);
  double sum = 0.0;
  bool negative = false;
  eliminate(work, n, [&](double piv, bool swapped) {
    negative = negative != swapped;
    if (piv == 0.0 || !(piv == piv)) {
      sum = piv == 0.0 ? -std::numeric_limits<double>::infinity() : piv;
      return false;
    }
    negative = negative != (piv < 0.0);
    sum += std::log(std::fabs(piv));
    return true;
  });
  if (std::isinf(sum) && sum < 0) return -std::numeric_limits<T>::infinity();
  return negative || !(sum == sum) ? std::numeric_limits<T>::quiet_NaN() : T(sum);
}

// y = inverse of the n x n matrix a (Gauss-Jordan with partial pivoting). work: 2 n^2.
template <class T>
void inv_dense(const T* a, uint32_t n, T* y, T* work) {
  if (n == 1) {
    y[0] = T(1) / a[0];
    return;
  }
  if (n == 2) {
    T d = a[0] * a[3] - a[1] * a[2];
    y[0] = a[3] / d;
    y[1] = -a[1] / d;
    y[2] = -a[2] / d;
    y[3] = a[0] / d;
    return;
  }
  T* w = work;
  std::copy(a, a + n * n, w);
  for (uint32_t i = 0; i < n * n; ++i) y[i] = T(0);
  for (uint32_t i = 0; i < n; ++i) y[i * n + i] = T(1);
  for (uint32_t c = 0; c < n; ++c) {
    uint32_t p = c;
    for (uint32_t r = c + 1; r < n; ++r)
      if (std::fabs(w[r * n + c]) > std::fabs(w[p * n + c])) p = r;
    if (p != c)
      for (uint32_t j = 0; j < n; ++j) {
        std::swap(w[c * n + j], w[p * n + j]);
        std::swap(y[c * n + j], y[p * n + j]);
      }
    T piv = w[c * n + c];
    for (uint32_t j = 0; j < n; ++j) {
      w[c * n + j] /= piv;
      y[c * n + j] /= piv;
    }
    for (uint32_t r = 0; r < n; ++r) {
      if (r == c) continue;
      T f = w[r * n + c];
      if (f == T(0)) continue;
      for (uint32_t j = 0; j < n; ++j) {
        w[r * n + j] -= f * w[c * n + j];
        y[r * n + j] -= f * y[c * n + j];
      }
    }
  }
}

// The adjoint of X = M B (M = A^-1): given G = d/dX, MtG = M^T G (n x k, which is d/dB for a
// solve) and GA = -(M^T G) X^T (n x n, d/dA). The inverse is the solve with B = I (X = M, k = n).
template <class T>
void solve_adjoint(const T* M, const T* G, const T* X, uint32_t n, uint32_t k, T* MtG, T* GA) {
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t c = 0; c < k; ++c) {
      T s = T(0);
      for (uint32_t j = 0; j < n; ++j) s += M[j * n + r] * G[j * k + c];
      MtG[r * k + c] = s;
    }
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t c = 0; c < n; ++c) {
      T s = T(0);
      for (uint32_t j = 0; j < k; ++j) s += MtG[r * k + j] * X[c * k + j];
      GA[r * n + c] = -s;
    }
}

template <class T>
struct NodeView;  // sweep.hpp

// 2x2 inverse across lanes: dA = -Y^T G Y^T, into four scratch rows first (a branch-free loop
// that vectorizes), then added under the node's mask.
template <class T>
void sweep_inv2(const NodeView<T>& v) {
  const uint32_t L = v.L;
  const T *g0 = v.out_adj(0), *g1 = v.out_adj(1), *g2 = v.out_adj(2), *g3 = v.out_adj(3);
  const T *y0 = v.out_val(0), *y1 = v.out_val(1), *y2 = v.out_val(2), *y3 = v.out_val(3);
  T* __restrict r0 = v.m.scratch_.data() + 2 * size_t(L);
  T* __restrict r1 = r0 + L;
  T* __restrict r2 = r1 + L;
  T* __restrict r3 = r2 + L;
  for (uint32_t l = 0; l < L; ++l) {
    T m00 = y0[l] * g0[l] + y2[l] * g2[l], m01 = y0[l] * g1[l] + y2[l] * g3[l];
    T m10 = y1[l] * g0[l] + y3[l] * g2[l], m11 = y1[l] * g1[l] + y3[l] * g3[l];
    r0[l] = -(m00 * y0[l] + m01 * y1[l]);
    r1[l] = -(m00 * y2[l] + m01 * y3[l]);
    r2[l] = -(m10 * y0[l] + m11 * y1[l]);
    r3[l] = -(m10 * y2[l] + m11 * y3[l]);
  }
  const T* rows[4] = {r0, r1, r2, r3};
  for (uint32_t i = 0; i < 4; ++i)
    if (T* d = v.adj(i)) kern::acc_plus(d, rows[i], T(1), v.live, L);
}

// 2x2 det and logdet across lanes: the cofactors (over det for logdet)
template <class T>
void sweep_det2(const NodeView<T>& v) {
  LanePtr<T> P[4];
  T* D[4];
  for (uint32_t i = 0; i < 4; ++i) {
    P[i] = v.lanes(i);
    D[i] = v.adj(i);
  }
  auto add = [&](int i, uint32_t l, T x) {
    if (D[i]) D[i][l] += x;
  };
  for (uint32_t l = 0; l < v.L; ++l) {
    if ((v.live && !v.live[l]) || v.g[l] == T(0)) continue;
    T a = P[0].p[l * P[0].stride], b = P[1].p[l * P[1].stride];
    T c = P[2].p[l * P[2].stride], d = P[3].p[l * P[3].stride];
    if (v.nd.op == Op::Det) {
      T w = v.g[l];
      add(0, l, w * d);
      add(1, l, -w * c);
      add(2, l, -w * b);
      add(3, l, w * a);
      continue;
    }
    // logdet: g A^-T, in double on the matrix scaled by its largest entry (a determinant of
    // 1e400, or of 1e40 in float32, is inf: the gradient was 0)
    double sc = std::max({std::fabs(double(a)), std::fabs(double(b)), std::fabs(double(c)),
                          std::fabs(double(d))});
    if (!(sc > 0.0) || !std::isfinite(sc)) sc = 1.0;
    double as = a / sc, bs = b / sc, cs = c / sc, ds = d / sc;
    double w = double(v.g[l]) / ((as * ds - bs * cs) * sc);
    add(0, l, T(w * ds));
    add(1, l, T(-w * cs));
    add(2, l, T(-w * bs));
    add(3, l, T(w * as));
  }
}

// d det / dA on one lane into GA (scaled by gl): cofactors up to 3x3 (exact even for a singular
// matrix), else det * A^-T; for logdet, A^-T.
template <class T>
void det_adjoint(Op op, const T* A, uint32_t n, T gl, T det, T* GA, T* W) {
  if (op == Op::Det && n == 1) {
    GA[0] = gl;
  } else if (op == Op::Det && n == 2) {
    GA[0] = gl * A[3]; GA[1] = -gl * A[2]; GA[2] = -gl * A[1]; GA[3] = gl * A[0];
  } else if (op == Op::Det && n == 3) {
    const T* a = A;
    T c[9] = {a[4] * a[8] - a[5] * a[7], -(a[3] * a[8] - a[5] * a[6]),
              a[3] * a[7] - a[4] * a[6], -(a[1] * a[8] - a[2] * a[7]),
              a[0] * a[8] - a[2] * a[6], -(a[0] * a[7] - a[1] * a[6]),
              a[1] * a[5] - a[2] * a[4], -(a[0] * a[5] - a[2] * a[3]),
              a[0] * a[4] - a[1] * a[3]};
    for (int i = 0; i < 9; ++i) GA[i] = gl * c[i];
  } else {
    const uint32_t nn = n * n;
    T* Ai = W + 2 * nn;
    inv_dense(A, n, Ai, W);
    T scale = op == Op::Det ? gl * det : gl;
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t c = 0; c < n; ++c) GA[r * n + c] = scale * Ai[c * n + r];
  }
}

// Any size, one lane at a time: gather the lane's matrix (and the outputs' values and adjoints),
// form the operands' adjoints in GA, add them.
template <class T>
void sweep_dense(const NodeView<T>& v) {
  const TapeNode& nd = v.nd;
  const uint32_t n = nd.extra, k = nd.extra2, nn = n * n;
  const uint32_t nin = nd.op == Op::Solve ? nn + n * k : nn;
  const uint32_t nout = nd.op == Op::Inv ? nn : n * k;  // gathered outputs (inverse, solve)
  std::vector<T>& w = v.m.linalg_work_;
  w.resize(nn + 2 * std::max(nn, n * k) + 3 * nn + 2 * n * k + nn + n * k);
  T* A = w.data();
  T* Y = A + nn;
  T* G = Y + std::max(nn, n * k);
  T* W = G + std::max(nn, n * k);
  T* GA = W + 3 * nn + 2 * n * k;
  for (uint32_t l = 0; l < v.L; ++l) {
    if (v.live && !v.live[l]) continue;
    for (uint32_t i = 0; i < nn; ++i) A[i] = v.val(i, l);
    std::fill(GA, GA + nin, T(0));
    if (nd.op == Op::Det || nd.op == Op::LogDet) {
      if (v.g[l] == T(0)) continue;
      det_adjoint(nd.op, A, n, v.g[l], v.y[l], GA, W);
    } else {
      for (uint32_t i = 0; i < nout; ++i) {
        Y[i] = v.out_val(i)[l];
        G[i] = v.out_adj(i)[l];
      }
      if (nd.op == Op::Inv) {  // dA = -Y^T G Y^T
        solve_adjoint(Y, G, Y, n, n, W, GA);
      } else {  // X = A^-1 B: dB = A^-T G, dA = -dB X^T
        T* Ai = W + 2 * nn;
        inv_dense(A, n, Ai, W);
        solve_adjoint(Ai, G, Y, n, k, GA + nn, GA);
      }
    }
    for (uint32_t i = 0; i < nin; ++i)
      if (T* gi = v.adj(i)) gi[l] += GA[i];
  }
}

template <class T>
void sweep_linalg(const NodeView<T>& v) {
  if (v.nd.extra == 2 && v.nd.op == Op::Inv) return sweep_inv2(v);
  if (v.nd.extra == 2 && v.nd.op != Op::Solve) return sweep_det2(v);
  sweep_dense(v);
}

}  // namespace detail

template <class T>
void Machine<T>::linalg(Op op, const Value* a, uint32_t n, const Value* b, uint32_t k, Value* out) {
  uint32_t nin = n * n + (op == Op::Solve ? n * k : 0);
  uint32_t nout = op == Op::Inv ? n * n : (op == Op::Solve ? n * k : 1);
  bool any_varying = false, act = false;
  std::vector<Value> ins(nin);
  for (uint32_t i = 0; i < n * n; ++i) ins[i] = a[i];
  if (op == Op::Solve)
    for (uint32_t i = 0; i < n * k; ++i) ins[n * n + i] = b[i];
  for (const Value& v : ins) {
    any_varying |= v.varying();
    act |= v.active();
  }
  act = act && recording_;
  if (n == 2 && any_varying && op != Op::Solve) {
    // 2x2 closed forms, vectorized across lanes (the state-space case: Kalman filters)
    uint32_t first = alloc_payloads(nout);
    T c0, c1, c2, c3;
    size_t s0, s1, s2, s3;
    const T* A0 = lanes_of(ins[0], c0, s0);
    const T* A1 = lanes_of(ins[1], c1, s1);
    const T* A2 = lanes_of(ins[2], c2, s2);
    const T* A3 = lanes_of(ins[3], c3, s3);
    if (op == Op::Inv) {
      T* y0 = pay(first);
      T* y1 = pay(first + 1);
      T* y2 = pay(first + 2);
      T* y3 = pay(first + 3);
      for (uint32_t l = 0; l < L_; ++l) {
        T a = A0[l * s0], b = A1[l * s1], c = A2[l * s2], d = A3[l * s3];
        T det = a * d - b * c;
        y0[l] = d / det;
        y1[l] = -b / det;
        y2[l] = -c / det;
        y3[l] = a / det;
      }
    } else if (op == Op::Det) {
      T* y = pay(first);
      for (uint32_t l = 0; l < L_; ++l)
        y[l] = A0[l * s0] * A3[l * s3] - A1[l * s1] * A2[l * s2];
    } else {  // (logdet: the determinant in double, and a finite log where it overflows)
      T* y = pay(first);
      for (uint32_t l = 0; l < L_; ++l) {
        double a = A0[l * s0], b = A1[l * s1], c = A2[l * s2], d = A3[l * s3];
        double det = a * d - b * c;
        if (std::isfinite(det) && det != 0.0 && std::fabs(det) > 1e-300) {
          y[l] = T(std::log(det));
        } else {
          double m[4] = {a, b, c, d}, w[4];
          y[l] = detail::logdet_dense(m, 2, w);
        }
      }
    }
    for (uint32_t i = 0; i < nout; ++i) out[i] = Value::payload(first + i, act);
    if (act) detail::Recorder<T>{*this}.record(op, ins.data(), nin, first, nout, n, k);
    return;
  }
  uint32_t lanes = any_varying ? L_ : 1;
  uint32_t first = any_varying ? alloc_payloads(nout) : 0;
  std::vector<T> A(n * n), B(op == Op::Solve ? n * k : 0), Y(nout), W(2 * n * n + n * k);
  for (uint32_t l = 0; l < lanes; ++l) {
    for (uint32_t i = 0; i < n * n; ++i) A[i] = lane(ins[i], l);
    switch (op) {
      case Op::Inv: detail::inv_dense(A.data(), n, Y.data(), W.data()); break;
      case Op::Det: Y[0] = detail::det_dense(A.data(), n, W.data()); break;
      case Op::LogDet: {
        std::vector<double>& D = logdet_work_;
        D.resize(size_t(n) * n);
        Y[0] = detail::logdet_dense(A.data(), n, D.data());
        break;
      }
      case Op::Solve: {
        T* Ai = W.data() + n * n;
        detail::inv_dense(A.data(), n, Ai, W.data());
        for (uint32_t i = 0; i < n * k; ++i) B[i] = lane(ins[n * n + i], l);
        for (uint32_t r = 0; r < n; ++r)
          for (uint32_t c = 0; c < k; ++c) {
            T s = T(0);
            for (uint32_t j = 0; j < n; ++j) s += Ai[r * n + j] * B[j * k + c];
            Y[r * k + c] = s;
          }
        break;
      }
      default: break;
    }
    if (!any_varying) {
      for (uint32_t i = 0; i < nout; ++i) out[i] = Value::number(double(Y[i]));
      return;
    }
    for (uint32_t i = 0; i < nout; ++i) pay(first + i)[l] = Y[i];
  }
  for (uint32_t i = 0; i < nout; ++i) out[i] = Value::payload(first + i, act);
  if (act) detail::Recorder<T>{*this}.record(op, ins.data(), nin, first, nout, n, k);
}

}  // namespace ndvm

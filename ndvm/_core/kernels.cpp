// Lane kernels with per-ISA clones (see kernels.hpp). Each loop is written so that the compiler
// vectorizes it: unit stride or a hoisted scalar, restrict pointers, branch-free selects.
#include "kernels.hpp"

#include <cmath>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NDVM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define NDVM_CLONES
#endif

namespace ndvm::kern {

namespace {

template <class T, class F>
inline void binop(T* __restrict y, const T* __restrict x, size_t sx, const T* __restrict z,
                  size_t sz, uint32_t L, F f) {
  if (sx && sz) {
    for (uint32_t l = 0; l < L; ++l) y[l] = f(x[l], z[l]);
  } else if (sx) {
    const T v = z[0];
    for (uint32_t l = 0; l < L; ++l) y[l] = f(x[l], v);
  } else if (sz) {
    const T u = x[0];
    for (uint32_t l = 0; l < L; ++l) y[l] = f(u, z[l]);
  } else {
    const T r = f(x[0], z[0]);
    for (uint32_t l = 0; l < L; ++l) y[l] = r;
  }
}

template <class T>
inline void arith_t(int op, T* y, const T* x, size_t sx, const T* z, size_t sz, uint32_t L) {
  switch (op) {
    case K_ADD: binop(y, x, sx, z, sz, L, [](T u, T v) { return u + v; }); break;
    case K_SUB: binop(y, x, sx, z, sz, L, [](T u, T v) { return u - v; }); break;
    case K_MUL: binop(y, x, sx, z, sz, L, [](T u, T v) { return u * v; }); break;
    default: binop(y, x, sx, z, sz, L, [](T u, T v) { return u / v; }); break;
  }
}

template <bool kSet, class T>
inline void fma_t(T* __restrict y, const T* __restrict x, size_t sx, const T* __restrict z,
                  size_t sz, uint32_t L) {
  if (sx && sz) {
    for (uint32_t l = 0; l < L; ++l) put<kSet>(y[l], x[l] * z[l]);
  } else if (sx) {
    const T c = z[0];
    for (uint32_t l = 0; l < L; ++l) put<kSet>(y[l], x[l] * c);
  } else if (sz) {
    const T c = x[0];
    for (uint32_t l = 0; l < L; ++l) put<kSet>(y[l], c * z[l]);
  } else {
    const T c = x[0] * z[0];
    for (uint32_t l = 0; l < L; ++l) put<kSet>(y[l], c);
  }
}

template <class T>
inline void fma_t(T* y, const T* x, size_t sx, const T* z, size_t sz, uint32_t L, bool set) {
  if (set) fma_t<true>(y, x, sx, z, sz, L);
  else fma_t<false>(y, x, sx, z, sz, L);
}

template <class T>
inline bool any_negative_zero_t(const T* __restrict p, uint32_t L) {
  int hit = 0;
  for (uint32_t l = 0; l < L; ++l) hit |= (p[l] == T(0)) & std::signbit(p[l]);
  return hit != 0;
}

template <class T>
inline bool all_finite_one_sign_t(const T* __restrict p, uint32_t L, bool* negative) {
  const bool neg = std::signbit(p[0]);
  int bad = 0;
  for (uint32_t l = 0; l < L; ++l)
    bad |= !(std::fabs(p[l]) <= std::numeric_limits<T>::max()) | (std::signbit(p[l]) != neg);
  *negative = neg;
  return bad == 0;
}

}  // namespace

NDVM_CLONES bool any_negative_zero(const double* p, uint32_t L) { return any_negative_zero_t(p, L); }
NDVM_CLONES bool any_negative_zero(const float* p, uint32_t L) { return any_negative_zero_t(p, L); }
NDVM_CLONES bool all_finite_one_sign(const double* p, uint32_t L, bool* negative) {
  return all_finite_one_sign_t(p, L, negative);
}
NDVM_CLONES bool all_finite_one_sign(const float* p, uint32_t L, bool* negative) {
  return all_finite_one_sign_t(p, L, negative);
}

NDVM_CLONES void arith(int op, double* y, const double* x, size_t sx, const double* z, size_t sz,
                       uint32_t L) {
  arith_t(op, y, x, sx, z, sz, L);
}
NDVM_CLONES void arith(int op, float* y, const float* x, size_t sx, const float* z, size_t sz,
                       uint32_t L) {
  arith_t(op, y, x, sx, z, sz, L);
}
NDVM_CLONES void fma_lanes(double* y, const double* x, size_t sx, const double* z, size_t sz,
                           uint32_t L, bool set) {
  fma_t(y, x, sx, z, sz, L, set);
}
NDVM_CLONES void fma_lanes(float* y, const float* x, size_t sx, const float* z, size_t sz,
                           uint32_t L, bool set) {
  fma_t(y, x, sx, z, sz, L, set);
}
NDVM_CLONES void acc_times(double* d, const double* g, const double* b, size_t bs,
                           const uint8_t* live, uint32_t L, bool set) {
  acc_times_t(d, g, b, bs, live, L, set);
}
NDVM_CLONES void acc_times(float* d, const float* g, const float* b, size_t bs,
                           const uint8_t* live, uint32_t L, bool set) {
  acc_times_t(d, g, b, bs, live, L, set);
}
NDVM_CLONES void acc_plus(double* d, const double* g, double sign, const uint8_t* live,
                          uint32_t L, bool set) {
  acc_plus_t(d, g, sign, live, L, set);
}
NDVM_CLONES void acc_plus(float* d, const float* g, float sign, const uint8_t* live, uint32_t L,
                          bool set) {
  acc_plus_t(d, g, sign, live, L, set);
}

}  // namespace ndvm::kern

// Vectorized exp, log, sin, cos and tanh, and pow, over lanes. On a CPU with AVX2+FMA (checked at
// run time; the default build targets any x86-64) they call glibc's libmvec vector kernels
// (tanh's from glibc 2.35: NDVM_HAVE_LIBMVEC_TANH); elsewhere, or without libmvec, the scalar
// libm. Every evaluation of these functions — uniform values included — goes through here, padded
// to a full vector, so a lane's result never depends on how many lanes run beside it (the
// lane-decomposition property stays bit-exact).
#pragma once
#include <cmath>
#include <cstddef>

#if defined(NDVM_HAVE_LIBMVEC) && defined(__x86_64__)
#include <immintrin.h>
#define NDVM_VMATH_AVX2 1
extern "C" {
__m256d _ZGVdN4v_exp(__m256d);
__m256d _ZGVdN4v_log(__m256d);
__m256d _ZGVdN4v_sin(__m256d);
__m256d _ZGVdN4v_cos(__m256d);
__m256d _ZGVdN4vv_pow(__m256d, __m256d);
__m256 _ZGVdN8v_expf(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_sinf(__m256);
__m256 _ZGVdN8v_cosf(__m256);
__m256 _ZGVdN8vv_powf(__m256, __m256);
#ifdef NDVM_HAVE_LIBMVEC_TANH
__m256d _ZGVdN4v_tanh(__m256d);
__m256 _ZGVdN8v_tanhf(__m256);
#endif
}
#endif

namespace ndvm::vmath {

enum class Fn { Exp, Log, Sin, Cos, Tanh };

inline double scalar(Fn f, double x) {
  switch (f) {
    case Fn::Exp: return std::exp(x);
    case Fn::Log: return std::log(x);
    case Fn::Sin: return std::sin(x);
    case Fn::Cos: return std::cos(x);
    default: return std::tanh(x);
  }
}
inline float scalar(Fn f, float x) {
  switch (f) {
    case Fn::Exp: return std::exp(x);
    case Fn::Log: return std::log(x);
    case Fn::Sin: return std::sin(x);
    case Fn::Cos: return std::cos(x);
    default: return std::tanh(x);
  }
}

#ifdef NDVM_VMATH_AVX2
inline bool has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

// Whether f has a vector kernel here (tanh's came with glibc 2.35).
inline bool vectorized(Fn f) {
#ifndef NDVM_HAVE_LIBMVEC_TANH
  if (f == Fn::Tanh) return false;
#endif
  return has_avx2();
}

// One AVX2 register of T (4 doubles or 8 floats): the kernels' loads, stores and functions.
__attribute__((target("avx2,fma"))) inline __m256d vload(const double* p) { return _mm256_loadu_pd(p); }
__attribute__((target("avx2,fma"))) inline __m256 vload(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma"))) inline void vstore(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
__attribute__((target("avx2,fma"))) inline void vstore(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
__attribute__((target("avx2,fma"))) inline __m256d vset1(double x) { return _mm256_set1_pd(x); }
__attribute__((target("avx2,fma"))) inline __m256 vset1(float x) { return _mm256_set1_ps(x); }
__attribute__((target("avx2,fma"))) inline __m256d vpow(__m256d a, __m256d b) { return _ZGVdN4vv_pow(a, b); }
__attribute__((target("avx2,fma"))) inline __m256 vpow(__m256 a, __m256 b) { return _ZGVdN8vv_powf(a, b); }

__attribute__((target("avx2,fma"))) inline __m256d vcall(Fn f, __m256d v) {
  switch (f) {
    case Fn::Exp: return _ZGVdN4v_exp(v);
    case Fn::Log: return _ZGVdN4v_log(v);
    case Fn::Sin: return _ZGVdN4v_sin(v);
#ifdef NDVM_HAVE_LIBMVEC_TANH
    case Fn::Tanh: return _ZGVdN4v_tanh(v);
#endif
    default: return _ZGVdN4v_cos(v);
  }
}
__attribute__((target("avx2,fma"))) inline __m256 vcall(Fn f, __m256 v) {
  switch (f) {
    case Fn::Exp: return _ZGVdN8v_expf(v);
    case Fn::Log: return _ZGVdN8v_logf(v);
    case Fn::Sin: return _ZGVdN8v_sinf(v);
#ifdef NDVM_HAVE_LIBMVEC_TANH
    case Fn::Tanh: return _ZGVdN8v_tanhf(v);
#endif
    default: return _ZGVdN8v_cosf(v);
  }
}

// y[i] = f(x[i]); the tail runs through the same vector kernel, padded with ones.
template <class T>
__attribute__((target("avx2,fma"))) inline void apply_avx2(Fn f, const T* x, T* y, size_t n) {
  constexpr size_t W = 32 / sizeof(T);
  size_t i = 0;
  for (; i + W <= n; i += W) vstore(y + i, vcall(f, vload(x + i)));
  if (i < n) {
    T buf[W];
    for (size_t j = 0; j < W; ++j) buf[j] = i + j < n ? x[i + j] : T(1);
    vstore(buf, vcall(f, vload(buf)));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = buf[j];
  }
}

// y[i] = a[i * sa] ^ b[i * sb] (strides 0 or 1); the tail padded with ones, as above.
template <class T>
__attribute__((target("avx2,fma"))) inline void pow_avx2(T* y, const T* a, size_t sa, const T* b,
                                                           size_t sb, size_t n) {
  constexpr size_t W = 32 / sizeof(T);
  size_t i = 0;
  const auto a0 = vset1(a[0]), b0 = vset1(b[0]);
  for (; i + W <= n; i += W) vstore(y + i, vpow(sa ? vload(a + i) : a0, sb ? vload(b + i) : b0));
  if (i < n) {
    T ba[W], bb[W];
    for (size_t j = 0; j < W; ++j) {
      ba[j] = i + j < n ? a[(i + j) * sa] : T(1);
      bb[j] = i + j < n ? b[(i + j) * sb] : T(1);
    }
    vstore(ba, vpow(vload(ba), vload(bb)));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = ba[j];
  }
}
#endif

// y[i] = f(x[i]) for i < n (x and y may be the same array).
template <class T>
inline void apply(Fn f, const T* x, T* y, size_t n) {
#ifdef NDVM_VMATH_AVX2
  if (vectorized(f)) {
    apply_avx2(f, x, y, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) y[i] = scalar(f, x[i]);
}

template <class T>
inline T one(Fn f, T x) {
  T y;
  apply(f, &x, &y, 1);
  return y;
}

// y[i] = pow(a[i * sa], b[i * sb]) for i < n, strides 0 (one value for every lane) or 1 (y may be
// a or b).
template <class T>
inline void pow_lanes(T* y, const T* a, size_t sa, const T* b, size_t sb, size_t n) {
#ifdef NDVM_VMATH_AVX2
  if (has_avx2()) {
    pow_avx2(y, a, sa, b, sb, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) y[i] = std::pow(a[i * sa], b[i * sb]);
}

template <class T>
inline T pow_one(T a, T b) {
  T y;
  pow_lanes(&y, &a, 0, &b, 0, 1);
  return y;
}

template <class T>
inline void log_lanes(const T* x, T* y, size_t n) {
  apply(Fn::Log, x, y, n);
}

}  // namespace ndvm::vmath

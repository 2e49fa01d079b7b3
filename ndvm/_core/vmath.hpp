// Vectorized exp, log, sin and cos over lanes. On a CPU with AVX2+FMA (checked at run time; the
// default build targets any x86-64) they call glibc's libmvec vector kernels; elsewhere, or
// without libmvec, the scalar libm. Every evaluation of these functions — uniform values
// included — goes through here, padded to a full vector, so a lane's result never depends on
// how many lanes run beside it (the lane-decomposition property stays bit-exact).
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
__m256 _ZGVdN8v_expf(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_sinf(__m256);
__m256 _ZGVdN8v_cosf(__m256);
}
#endif

namespace ndvm::vmath {

enum class Fn { Exp, Log, Sin, Cos };

inline double scalar(Fn f, double x) {
  switch (f) {
    case Fn::Exp: return std::exp(x);
    case Fn::Log: return std::log(x);
    case Fn::Sin: return std::sin(x);
    default: return std::cos(x);
  }
}
inline float scalar(Fn f, float x) {
  switch (f) {
    case Fn::Exp: return std::exp(x);
    case Fn::Log: return std::log(x);
    case Fn::Sin: return std::sin(x);
    default: return std::cos(x);
  }
}

#ifdef NDVM_VMATH_AVX2
inline bool has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

__attribute__((target("avx2,fma"))) inline __m256d call4(Fn f, __m256d v) {
  switch (f) {
    case Fn::Exp: return _ZGVdN4v_exp(v);
    case Fn::Log: return _ZGVdN4v_log(v);
    case Fn::Sin: return _ZGVdN4v_sin(v);
    default: return _ZGVdN4v_cos(v);
  }
}
__attribute__((target("avx2,fma"))) inline __m256 call8(Fn f, __m256 v) {
  switch (f) {
    case Fn::Exp: return _ZGVdN8v_expf(v);
    case Fn::Log: return _ZGVdN8v_logf(v);
    case Fn::Sin: return _ZGVdN8v_sinf(v);
    default: return _ZGVdN8v_cosf(v);
  }
}

__attribute__((target("avx2,fma"))) inline void apply_avx2(Fn f, const double* x, double* y,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, call4(f, _mm256_loadu_pd(x + i)));
  if (i < n) {  // the tail runs through the same vector kernel, padded with ones
    alignas(32) double buf[4] = {1.0, 1.0, 1.0, 1.0};
    for (size_t j = 0; i + j < n; ++j) buf[j] = x[i + j];
    _mm256_store_pd(buf, call4(f, _mm256_load_pd(buf)));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = buf[j];
  }
}
__attribute__((target("avx2,fma"))) inline void apply_avx2(Fn f, const float* x, float* y,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, call8(f, _mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (size_t j = 0; i + j < n; ++j) buf[j] = x[i + j];
    _mm256_store_ps(buf, call8(f, _mm256_load_ps(buf)));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = buf[j];
  }
}
#endif

// y[i] = f(x[i]) for i < n (x and y may be the same array).
template <class T>
inline void apply(Fn f, const T* x, T* y, size_t n) {
#ifdef NDVM_VMATH_AVX2
  if (has_avx2()) {
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

template <class T>
inline void log_lanes(const T* x, T* y, size_t n) {
  apply(Fn::Log, x, y, n);
}

}  // namespace ndvm::vmath

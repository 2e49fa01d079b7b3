// The hot lane loops (elementwise arithmetic, multiply-accumulate, adjoint accumulation), compiled
// once per instruction set in kernels.cpp: an AVX2 clone and a baseline x86-64 clone, picked at
// load time by the CPU (GCC function multi-versioning). No FMA contraction is enabled in either
// clone, so both give bit-identical IEEE results.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ndvm::kern {

enum ArithOp : int { K_ADD = 0, K_SUB = 1, K_MUL = 2, K_DIV = 3 };

// y[l] = x[l*sx] op z[l*sz]  (strides 0 or 1)
void arith(int op, double* y, const double* x, size_t sx, const double* z, size_t sz, uint32_t L);
void arith(int op, float* y, const float* x, size_t sx, const float* z, size_t sz, uint32_t L);

// y[l] += x[l*sx] * z[l*sz]
void fma_lanes(double* y, const double* x, size_t sx, const double* z, size_t sz, uint32_t L);
void fma_lanes(float* y, const float* x, size_t sx, const float* z, size_t sz, uint32_t L);

// d[l] += g[l] * b[l*bs] on the lanes of `live` (all when null); zero g contributes exactly 0
void acc_times(double* d, const double* g, const double* b, size_t bs, const uint8_t* live,
               uint32_t L);
void acc_times(float* d, const float* g, const float* b, size_t bs, const uint8_t* live,
               uint32_t L);

// d[l] += sign * g[l] on the lanes of `live`
void acc_plus(double* d, const double* g, double sign, const uint8_t* live, uint32_t L);
void acc_plus(float* d, const float* g, float sign, const uint8_t* live, uint32_t L);

// true when some lane is -0.0
bool any_negative_zero(const double* p, uint32_t L);
bool any_negative_zero(const float* p, uint32_t L);

// true when every lane is finite and all have the sign of lane 0 (returned in *negative)
bool all_finite_one_sign(const double* p, uint32_t L, bool* negative);
bool all_finite_one_sign(const float* p, uint32_t L, bool* negative);

// The two adjoint loops as templates: kernels.cpp compiles them per ISA above; the reverse sweep
// also runs acc_times_t inline for a few lanes, where the call would cost more than the loop.
template <class T>
inline void acc_times_t(T* __restrict d, const T* __restrict g, const T* __restrict b, size_t bs,
                        const uint8_t* __restrict live, uint32_t L) {
  if (live) {
    for (uint32_t l = 0; l < L; ++l)
      if (live[l] && g[l] != T(0)) d[l] += g[l] * b[l * bs];
  } else if (bs) {
    for (uint32_t l = 0; l < L; ++l) {
      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free
      d[l] += g[l] != T(0) ? v : T(0);
    }
  } else {
    const T c = b[0];
    for (uint32_t l = 0; l < L; ++l) {
      T v = g[l] * c;
      d[l] += g[l] != T(0) ? v : T(0);
    }
  }
}

template <class T>
inline void acc_plus_t(T* __restrict d, const T* __restrict g, T sign,
                       const uint8_t* __restrict live, uint32_t L) {
  if (live) {
    for (uint32_t l = 0; l < L; ++l)
      if (live[l]) d[l] += sign * g[l];
  } else {
    for (uint32_t l = 0; l < L; ++l) d[l] += sign * g[l];
  }
}

}  // namespace ndvm::kern

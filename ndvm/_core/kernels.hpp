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

// y[l] += x[l*sx] * z[l*sz]  (with set: y[l] = 0 + x[l*sx] * z[l*sz], see put below)
void fma_lanes(double* y, const double* x, size_t sx, const double* z, size_t sz, uint32_t L,
               bool set = false);
void fma_lanes(float* y, const float* x, size_t sx, const float* z, size_t sz, uint32_t L,
               bool set = false);

// d[l] += g[l] * b[l*bs] on the lanes of `live` (all when null); zero g contributes exactly 0
void acc_times(double* d, const double* g, const double* b, size_t bs, const uint8_t* live,
               uint32_t L, bool set = false);
void acc_times(float* d, const float* g, const float* b, size_t bs, const uint8_t* live,
               uint32_t L, bool set = false);

// d[l] += sign * g[l] on the lanes of `live`
void acc_plus(double* d, const double* g, double sign, const uint8_t* live, uint32_t L,
              bool set = false);
void acc_plus(float* d, const float* g, float sign, const uint8_t* live, uint32_t L,
              bool set = false);

// true when some lane is -0.0
bool any_negative_zero(const double* p, uint32_t L);
bool any_negative_zero(const float* p, uint32_t L);

// true when every lane is finite and all have the sign of lane 0 (returned in *negative)
bool all_finite_one_sign(const double* p, uint32_t L, bool* negative);
bool all_finite_one_sign(const float* p, uint32_t L, bool* negative);

// The two adjoint loops as templates: kernels.cpp compiles them per ISA above; the reverse sweep
// also runs acc_times_t inline for a few lanes, where the call would cost more than the loop.
// With `set` (the adjoint's first contribution) they store 0 + the term instead of adding it, on
// every lane (0 where masked off): the bits an add to a zeroed adjoint would give, without the
// zeroing pass and the load.
template <bool kSet, class T>
inline void put(T& d, T v) {
  if constexpr (kSet) d = T(0) + v; else d += v;
}

template <bool kSet, class T>
inline void acc_times_t(T* __restrict d, const T* __restrict g, const T* __restrict b, size_t bs,
                        const uint8_t* __restrict live, uint32_t L) {
  if (live) {
    for (uint32_t l = 0; l < L; ++l) {
      if (live[l] && g[l] != T(0)) put<kSet>(d[l], g[l] * b[l * bs]);
      else if (kSet) d[l] = T(0);
    }
  } else if (bs) {
    for (uint32_t l = 0; l < L; ++l) {
      T v = g[l] * b[l];  // computed unconditionally, then selected: the loop stays branch-free
      put<kSet>(d[l], g[l] != T(0) ? v : T(0));
    }
  } else {
    const T c = b[0];
    for (uint32_t l = 0; l < L; ++l) {
      T v = g[l] * c;
      put<kSet>(d[l], g[l] != T(0) ? v : T(0));
    }
  }
}

template <bool kSet, class T>
inline void acc_plus_t(T* __restrict d, const T* __restrict g, T sign,
                       const uint8_t* __restrict live, uint32_t L) {
  if (live) {
    for (uint32_t l = 0; l < L; ++l) {
      if (live[l]) put<kSet>(d[l], sign * g[l]);
      else if (kSet) d[l] = T(0);
    }
  } else {
    for (uint32_t l = 0; l < L; ++l) put<kSet>(d[l], sign * g[l]);
  }
}

template <class T>
inline void acc_times_t(T* d, const T* g, const T* b, size_t bs, const uint8_t* live, uint32_t L,
                        bool set) {
  if (set) acc_times_t<true>(d, g, b, bs, live, L);
  else acc_times_t<false>(d, g, b, bs, live, L);
}

template <class T>
inline void acc_plus_t(T* d, const T* g, T sign, const uint8_t* live, uint32_t L, bool set) {
  if (set) acc_plus_t<true>(d, g, sign, live, L);
  else acc_plus_t<false>(d, g, sign, live, L);
}

}  // namespace ndvm::kern

// The op table: each elementwise numeric primitive's forward rule and adjoint rule, side by side,
// one struct per UNARY or BINARY entry of the list (NDVM_NUMERIC, tape.hpp). `f` is one lane,
// `lanes` all lanes (the vectorized kernel where there is one); `partial` (unary) and `partials`
// (binary) give d y / d operand per lane, as a lane pointer with stride 0 (one value for every
// lane) or 1. The forward ops (numeric.hpp) and the reverse sweep (sweep.hpp) both dispatch
// through with_unary / with_binary, generated from the list, so a rule is written exactly once.
// Structured ops (select, min/max, dot) live in numeric.hpp and sweep.hpp; linear algebra in
// linalg.hpp.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <string>

#include "error.hpp"
#include "kernels.hpp"
#include "tape.hpp"
#include "vmath.hpp"

// Per-node dispatch in the sweep is inlined: at one lane its call overhead is the cost
#if defined(__GNUC__) || defined(__clang__)
#define NDVM_INLINE inline __attribute__((always_inline))
#define NDVM_INLINE_LAMBDA __attribute__((always_inline))
#else
#define NDVM_INLINE inline
#define NDVM_INLINE_LAMBDA
#endif

namespace ndvm {

// Per-lane values p[l * stride]: stride 0 is one value shared by every lane.
template <class T>
struct LanePtr {
  const T* p;
  size_t stride;
};

// The comparisons (PRIM entries of form `compare`; Machine::compare).
enum Cmp : int { CMP_EQ, CMP_LT, CMP_GT, CMP_LE, CMP_GE };

namespace ops {

// Defaults: the lane loop and the partials are the one-lane rules (f, d) applied to every lane.
// An entry that has a lane kernel of its own for its partials defines `partial(s)` instead of `d`,
// so each rule is written once.
template <class Self>
struct Unary {
  template <class T>
  static void lanes(const T* x, T* y, uint32_t L) {
    for (uint32_t l = 0; l < L; ++l) y[l] = Self::f(x[l]);
  }
  template <class T>
  static LanePtr<T> partial(const T* x, const T* y, T* buf, uint32_t L) {
    for (uint32_t l = 0; l < L; ++l) buf[l] = Self::d(x[l], y[l]);
    return {buf, 1};
  }
};

template <class Self>
struct Binary {
  template <class T>
  static void lanes(T* y, const T* a, size_t sa, const T* b, size_t sb, uint32_t L) {
    for (uint32_t l = 0; l < L; ++l) y[l] = Self::f(a[l * sa], b[l * sb]);
  }
  // bufs: two lane buffers for the partials that need computing
  template <class T>
  static void partials(LanePtr<T> a, LanePtr<T> b, const T* y, T* bufs, uint32_t L,
                       LanePtr<T>& da, LanePtr<T>& db) {
    T* ba = bufs;
    T* bb = bufs + L;
    for (uint32_t l = 0; l < L; ++l) Self::d(a.p[l * a.stride], b.p[l * b.stride], y[l], ba[l], bb[l]);
    da = {ba, 1};
    db = {bb, 1};
  }
};

// A partial that is the same constant on every lane (kept in a static, so the pointer outlives
// the call).
template <class T, int C>
LanePtr<T> constant() {
  static const T c = T(C);
  return {&c, 0};
}

// ---- unary: y = f(x); d = dy/dx given x and y --------------------------------------------------
struct Neg : Unary<Neg> {
  template <class T> static T f(T x) { return -x; }
  template <class T> static LanePtr<T> partial(const T*, const T*, T*, uint32_t) {
    return constant<T, -1>();
  }
};
struct Abs : Unary<Abs> {
  template <class T> static T f(T x) { return std::fabs(x); }
  template <class T> static T d(T x, T) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
};
struct Sqrt : Unary<Sqrt> {
  template <class T> static T f(T x) { return std::sqrt(x); }
  template <class T> static T d(T, T y) { return T(0.5) / y; }
};
struct Exp : Unary<Exp> {
  template <class T> static T f(T x) { return vmath::one(vmath::Fn::Exp, x); }
  template <class T> static void lanes(const T* x, T* y, uint32_t L) {
    vmath::apply(vmath::Fn::Exp, x, y, L);
  }
  template <class T> static LanePtr<T> partial(const T*, const T* y, T*, uint32_t) { return {y, 1}; }
};
struct Log : Unary<Log> {
  template <class T> static T f(T x) { return vmath::one(vmath::Fn::Log, x); }
  template <class T> static T d(T x, T) { return T(1) / x; }
  template <class T> static void lanes(const T* x, T* y, uint32_t L) {
    vmath::apply(vmath::Fn::Log, x, y, L);
  }
};
struct Sin : Unary<Sin> {
  template <class T> static T f(T x) { return vmath::one(vmath::Fn::Sin, x); }
  template <class T> static void lanes(const T* x, T* y, uint32_t L) {
    vmath::apply(vmath::Fn::Sin, x, y, L);
  }
  template <class T> static LanePtr<T> partial(const T* x, const T*, T* buf, uint32_t L) {
    vmath::apply(vmath::Fn::Cos, x, buf, L);
    return {buf, 1};
  }
};
struct Cos : Unary<Cos> {
  template <class T> static T f(T x) { return vmath::one(vmath::Fn::Cos, x); }
  template <class T> static void lanes(const T* x, T* y, uint32_t L) {
    vmath::apply(vmath::Fn::Cos, x, y, L);
  }
  template <class T> static LanePtr<T> partial(const T* x, const T*, T* buf, uint32_t L) {
    vmath::apply(vmath::Fn::Sin, x, buf, L);
    for (uint32_t l = 0; l < L; ++l) buf[l] = -buf[l];
    return {buf, 1};
  }
};
struct Tan : Unary<Tan> {
  template <class T> static T f(T x) { return std::tan(x); }
  template <class T> static T d(T, T y) { return T(1) + y * y; }
};
struct Tanh : Unary<Tanh> {
  template <class T> static T f(T x) { return vmath::one(vmath::Fn::Tanh, x); }
  template <class T> static void lanes(const T* x, T* y, uint32_t L) {
    vmath::apply(vmath::Fn::Tanh, x, y, L);
  }
  template <class T> static T d(T, T y) { return T(1) - y * y; }
};
struct Atan : Unary<Atan> {
  template <class T> static T f(T x) { return std::atan(x); }
  template <class T> static T d(T x, T) { return T(1) / (T(1) + x * x); }
};
// floor, ceiling, round (to even), truncate: piecewise constant, zero derivative
template <class Self>
struct Step : Unary<Self> {
  template <class T> static LanePtr<T> partial(const T*, const T*, T*, uint32_t) {
    return constant<T, 0>();
  }
};
struct Floor : Step<Floor> { template <class T> static T f(T x) { return std::floor(x); } };
struct Ceil : Step<Ceil> { template <class T> static T f(T x) { return std::ceil(x); } };
struct Round : Step<Round> { template <class T> static T f(T x) { return std::nearbyint(x); } };
struct Trunc : Step<Trunc> { template <class T> static T f(T x) { return std::trunc(x); } };
// the reference runtime's sqrt and log (compat="reference"): argument clamped at 1e-8, and a zero
// derivative below the clamp
struct SqrtRef : Unary<SqrtRef> {
  template <class T> static T f(T x) { return std::sqrt(x < T(1e-8) ? T(1e-8) : x); }
  template <class T> static T d(T x, T y) { return x < T(1e-8) ? T(0) : T(0.5) / y; }
};
struct LogRef : Unary<LogRef> {
  template <class T> static T f(T x) { return std::log(x < T(1e-8) ? T(1e-8) : x); }
  template <class T> static T d(T x, T) { return x < T(1e-8) ? T(0) : T(1) / x; }
};

// ---- binary: y = f(a, b); d gives (da, db); no partial divides by a factor of a product --------
template <class Self, int K>  // the four arithmetic operators run the per-ISA kernels
struct Arith : Binary<Self> {
  template <class T>
  static void lanes(T* y, const T* a, size_t sa, const T* b, size_t sb, uint32_t L) {
    kern::arith(K, y, a, sa, b, sb, L);
  }
};
struct Add : Arith<Add, kern::K_ADD> {
  template <class T> static T f(T a, T b) { return a + b; }
  template <class T>
  static void partials(LanePtr<T>, LanePtr<T>, const T*, T*, uint32_t, LanePtr<T>& da,
                       LanePtr<T>& db) {
    da = constant<T, 1>();
    db = constant<T, 1>();
  }
};
struct Sub : Arith<Sub, kern::K_SUB> {
  template <class T> static T f(T a, T b) { return a - b; }
  template <class T>
  static void partials(LanePtr<T>, LanePtr<T>, const T*, T*, uint32_t, LanePtr<T>& da,
                       LanePtr<T>& db) {
    da = constant<T, 1>();
    db = constant<T, -1>();
  }
};
struct Mul : Arith<Mul, kern::K_MUL> {
  template <class T> static T f(T a, T b) { return a * b; }
  template <class T>
  static void partials(LanePtr<T> a, LanePtr<T> b, const T*, T*, uint32_t, LanePtr<T>& da,
                       LanePtr<T>& db) {
    da = b;  // the operands' own lanes: nothing to compute
    db = a;
  }
};
struct Div : Arith<Div, kern::K_DIV> {
  template <class T> static T f(T a, T b) { return a / b; }
  template <class T> static void d(T, T b, T y, T& da, T& db) { da = T(1) / b; db = -y / b; }
};
struct Pow : Binary<Pow> {
  template <class T> static T f(T a, T b) { return vmath::pow_one(a, b); }
  template <class T>
  static void lanes(T* y, const T* a, size_t sa, const T* b, size_t sb, uint32_t L) {
    vmath::pow_lanes(y, a, sa, b, sb, L);
  }
  // da = b a^(b-1) (0 where b is 0), db = a^b log a (0 where a <= 0), on the vector kernels
  template <class T>
  static void partials(LanePtr<T> a, LanePtr<T> b, const T* y, T* bufs, uint32_t L,
                       LanePtr<T>& da, LanePtr<T>& db) {
    T* ba = bufs;
    T* bb = bufs + L;
    for (uint32_t l = 0; l < L; ++l) {
      ba[l] = b.p[l * b.stride] - T(1);
      T x = a.p[l * a.stride];
      bb[l] = x > T(0) ? x : T(1);
    }
    vmath::pow_lanes(ba, a.p, a.stride, ba, size_t(1), L);
    vmath::apply(vmath::Fn::Log, bb, bb, L);
    for (uint32_t l = 0; l < L; ++l) {
      T e = b.p[l * b.stride];
      ba[l] = e == T(0) ? T(0) : e * ba[l];
      bb[l] = a.p[l * a.stride] > T(0) ? y[l] * bb[l] : T(0);
    }
    da = {ba, 1};
    db = {bb, 1};
  }
};
struct Atan2 : Binary<Atan2> {
  template <class T> static T f(T a, T b) { return std::atan2(a, b); }
  template <class T> static void d(T a, T b, T, T& da, T& db) {
    T r = a * a + b * b;
    da = b / r;
    db = -a / r;
  }
};
struct Mod : Binary<Mod> {  // R7RS floor-remainder: the sign of the divisor
  template <class T> static T f(T a, T b) {
    T r = std::fmod(a, b);
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  }
  template <class T> static void d(T a, T b, T, T& da, T& db) { da = T(1); db = -std::floor(a / b); }
};
struct Rem : Binary<Rem> {  // R7RS truncate-remainder: the sign of the dividend
  template <class T> static T f(T a, T b) { return std::fmod(a, b); }
  template <class T> static void d(T a, T b, T, T& da, T& db) { da = T(1); db = -std::trunc(a / b); }
};

}  // namespace ops

// Calls fn(rule) with the rule of a UNARY op (an empty struct whose static members are the
// rules), or of a BINARY op. Each switch names every op of the list, with no default: an op of
// another family is an internal error (the sweep calls these for its family's nodes only, and the
// primitives with their own family's ops).
[[noreturn]] __attribute__((noinline, cold)) inline void wrong_family(Op op, const char* want) {
  throw Error(ErrorKind::Internal, "op " + std::to_string(int(op)) + " is not a " + want + " op");
}

NDVM_COMPLETE_SWITCHES
#define NDVM_RULE_CASE(name) case Op::name: return fn(ops::name{});
#define NDVM_OTHER_CASE(name, ...) case Op::name: break;

template <class Fn>
NDVM_INLINE decltype(auto) with_unary(Op op, Fn&& fn) {
  switch (op) {
    NDVM_NUMERIC(NDVM_RULE_CASE, NDVM_OTHER_CASE, NDVM_OTHER_CASE, NDVM_SKIP)
  }
  wrong_family(op, "unary");
}

template <class Fn>
NDVM_INLINE decltype(auto) with_binary(Op op, Fn&& fn) {
  switch (op) {
    NDVM_NUMERIC(NDVM_OTHER_CASE, NDVM_RULE_CASE, NDVM_OTHER_CASE, NDVM_SKIP)
  }
  wrong_family(op, "binary");
}

#undef NDVM_RULE_CASE
#undef NDVM_OTHER_CASE
NDVM_END_COMPLETE_SWITCHES

}  // namespace ndvm

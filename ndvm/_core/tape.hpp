// The tape: numeric operations only, recorded only when an input is active (depends on a
// parameter). A node reads operands (a uniform constant, an inactive payload, or an active payload)
// and writes `nout` consecutive payloads. Nodes recorded inside a lane mask accumulate adjoints only
// on that mask's lanes, so dead lanes never leak NaN or inf into live gradients.
#pragma once
#include <cmath>
#include <cstdint>

#include "vmath.hpp"

namespace ndvm {

enum class Op : uint8_t {
  // unary: out = f(a)
  Neg, Abs, Sqrt, Exp, Log, Sin, Cos, Tan, Tanh, Atan, Square, Floor, Ceil, Round, Trunc,
  SqrtRef, LogRef,  // the reference runtime's clamped sqrt/log (compat="reference")
  // binary: out = f(a, b)
  Add, Sub, Mul, Div, Pow, Atan2, Mod, Rem,
  // n-ary and structured
  Select,  // out = mask ? a : b; node.extra = mask id
  Min,     // out = min(in...); ties split the adjoint evenly
  Max,
  Dot,     // out = sum_i in[2i] * in[2i+1]
  Inv,     // n x n matrix -> n*n outputs; extra = n
  Det,     // n x n -> 1; extra = n
  LogDet,  // n x n -> 1; extra = n
  Solve,   // (A n x n, B n x k) -> n*k outputs; extra = n, extra2 = k
};

inline bool op_is_unary(Op op) { return op <= Op::LogRef; }

// Where an operand lives.
enum : uint8_t { OPND_CONST = 0, OPND_PAYLOAD = 1, OPND_ACTIVE = 2 };

struct Operand {
  uint32_t id;   // index into the tape's constants, or a payload id
  uint8_t kind;  // OPND_*
};

struct TapeNode {
  Op op;
  uint32_t nin;
  int32_t mask;    // lane mask the node was recorded under, -1 for all lanes
  uint32_t out;    // first output payload
  uint32_t nout;
  uint32_t in;     // first operand in Machine::operands_
  uint32_t extra;  // op-specific (select mask, matrix size)
  uint32_t extra2;
};

// Scalar kernels shared by the forward pass and the reverse sweep.
template <class T>
struct Scalar {
  static T rem(T a, T b) { return std::fmod(a, b); }
  static T mod(T a, T b) {
    T r = std::fmod(a, b);
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  }
  static T round_even(T x) { return std::nearbyint(x); }

  static T unary(Op op, T x) {
    switch (op) {
      case Op::Neg: return -x;
      case Op::Abs: return std::fabs(x);
      case Op::Sqrt: return std::sqrt(x);
      case Op::Exp: return vmath::one(vmath::Fn::Exp, x);  // the lanes' kernel (vmath.hpp)
      case Op::Log: return vmath::one(vmath::Fn::Log, x);
      case Op::Sin: return vmath::one(vmath::Fn::Sin, x);
      case Op::Cos: return vmath::one(vmath::Fn::Cos, x);
      case Op::Tan: return std::tan(x);
      case Op::Tanh: return std::tanh(x);
      case Op::Atan: return std::atan(x);
      case Op::Square: return x * x;
      case Op::Floor: return std::floor(x);
      case Op::Ceil: return std::ceil(x);
      case Op::Round: return round_even(x);
      case Op::Trunc: return std::trunc(x);
      case Op::SqrtRef: return std::sqrt(x < T(1e-8) ? T(1e-8) : x);
      case Op::LogRef: return std::log(x < T(1e-8) ? T(1e-8) : x);
      default: return x;
    }
  }
  // d f(x) / dx given x and y = f(x)
  static T dunary(Op op, T x, T y) {
    switch (op) {
      case Op::Neg: return T(-1);
      case Op::Abs: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
      case Op::Sqrt: return T(0.5) / y;
      case Op::Exp: return y;
      case Op::Log: return T(1) / x;
      case Op::Sin: return vmath::one(vmath::Fn::Cos, x);
      case Op::Cos: return -vmath::one(vmath::Fn::Sin, x);
      case Op::Tan: return T(1) + y * y;
      case Op::Tanh: return T(1) - y * y;
      case Op::Atan: return T(1) / (T(1) + x * x);
      case Op::Square: return T(2) * x;
      case Op::SqrtRef: return x < T(1e-8) ? T(0) : T(0.5) / y;
      case Op::LogRef: return x < T(1e-8) ? T(0) : T(1) / x;
      default: return T(0);  // floor, ceiling, round, truncate: piecewise constant
    }
  }
  static T binary(Op op, T a, T b) {
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return a / b;
      case Op::Pow: return std::pow(a, b);
      case Op::Atan2: return std::atan2(a, b);
      case Op::Mod: return mod(a, b);
      case Op::Rem: return rem(a, b);
      default: return T(0);
    }
  }
  // partials (da, db) of y = f(a, b); no partial ever divides by a factor of a product
  static void dbinary(Op op, T a, T b, T y, T& da, T& db) {
    switch (op) {
      case Op::Add: da = T(1); db = T(1); return;
      case Op::Sub: da = T(1); db = T(-1); return;
      case Op::Mul: da = b; db = a; return;
      case Op::Div: da = T(1) / b; db = -y / b; return;
      case Op::Pow:
        da = b == T(0) ? T(0) : b * std::pow(a, b - T(1));
        db = a > T(0) ? y * std::log(a) : T(0);
        return;
      case Op::Atan2: {
        T r = a * a + b * b;
        da = b / r;
        db = -a / r;
        return;
      }
      case Op::Mod: da = T(1); db = -std::floor(a / b); return;
      case Op::Rem: da = T(1); db = -std::trunc(a / b); return;
      default: da = db = T(0); return;
    }
  }
};

}  // namespace ndvm

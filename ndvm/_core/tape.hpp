// The tape: numeric operations only, recorded only when an input is active (depends on a
// parameter). A node reads operands (a uniform constant, an inactive payload, or an active payload)
// and writes `nout` consecutive payloads. Nodes recorded inside a lane mask accumulate adjoints
// only on that mask's lanes, so dead lanes never leak NaN or inf into live gradients. Each op's
// forward and adjoint rules are in the op table (ops.hpp) and linalg.hpp.
#pragma once
#include <cstdint>

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

// How the reverse sweep treats an op (sweep.hpp): one small function per family.
enum class OpFamily : uint8_t { Unary, Binary, Select, MinMax, Dot, Linalg };

inline OpFamily op_family(Op op) {
  if (op <= Op::LogRef) return OpFamily::Unary;
  if (op <= Op::Rem) return OpFamily::Binary;
  if (op == Op::Select) return OpFamily::Select;
  if (op == Op::Min || op == Op::Max) return OpFamily::MinMax;
  if (op == Op::Dot) return OpFamily::Dot;
  return OpFamily::Linalg;
}

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

}  // namespace ndvm

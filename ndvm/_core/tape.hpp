// The tape: numeric operations only, recorded only when an input is active (depends on a
// parameter). A node reads operands (a uniform constant, an inactive payload, or an active payload)
// and writes `nout` consecutive payloads. Nodes recorded inside a lane mask accumulate adjoints
// only on that mask's lanes, so dead lanes never leak NaN or inf into live gradients. The ops, and
// the numeric primitives that record them, are one list (NDVM_NUMERIC below); their rules are in
// ops.hpp (unary, binary), numeric.hpp and sweep.hpp (select, min/max, dot) and linalg.hpp.
#pragma once
#include <cstdint>

namespace ndvm {

// The numeric primitives, one line each (docs/primitives.md: adding one). Four kinds of entry:
//   UNARY(Name), BINARY(Name)   a tape op Op::Name whose forward and adjoint rules are the struct
//                               ops::Name (ops.hpp); a missing struct does not compile
//   OP(Name, Family)            a tape op of a structured family, differentiated by the family's
//                               function in sweep.hpp / linalg.hpp
//   PRIM(ID, "scheme", lo, hi, form, arg)   the Scheme primitive P_ID taking lo..hi arguments
//                               (hi -1: variadic), called by Prims::call_<form> (prims.hpp) with
//                               arg (an op, or a comparison for `compare`); listed by
//                               ndvm._core.primitives()
// Forms: arith (variadic + - * /, elementwise with scalar broadcasting), compare (a chain of
// comparisons), minmax, unary (numbers only), elementwise (unary, also on vectors and matrices),
// binary (numbers only), atan (one argument: the op; two: atan2), square (arg applied to x, x).
#define NDVM_NUMERIC(UNARY, BINARY, OP, PRIM)                                                 \
  BINARY(Add)        PRIM(ADD, "+", 0, -1, arith, Op::Add)                                    \
  BINARY(Sub)        PRIM(SUB, "-", 1, -1, arith, Op::Sub)                                    \
  BINARY(Mul)        PRIM(MUL, "*", 0, -1, arith, Op::Mul)                                    \
  BINARY(Div)        PRIM(DIV, "/", 1, -1, arith, Op::Div)                                    \
                     PRIM(EQ, "=", 1, -1, compare, CMP_EQ)                                    \
                     PRIM(LT, "<", 1, -1, compare, CMP_LT)                                    \
                     PRIM(GT, ">", 1, -1, compare, CMP_GT)                                    \
                     PRIM(LE, "<=", 1, -1, compare, CMP_LE)                                   \
                     PRIM(GE, ">=", 1, -1, compare, CMP_GE)                                   \
  OP(Min, MinMax)    PRIM(MIN, "min", 1, -1, minmax, Op::Min)  /* ties split the adjoint */   \
  OP(Max, MinMax)    PRIM(MAX, "max", 1, -1, minmax, Op::Max)                                 \
  UNARY(Abs)         PRIM(ABS, "abs", 1, 1, unary, Op::Abs)                                   \
  UNARY(Sqrt)        PRIM(SQRT, "sqrt", 1, 1, elementwise, Op::Sqrt)                          \
  UNARY(Exp)         PRIM(EXP, "exp", 1, 1, elementwise, Op::Exp)                             \
  UNARY(Log)         PRIM(LOG, "log", 1, 1, elementwise, Op::Log)                             \
  UNARY(Sin)         PRIM(SIN, "sin", 1, 1, elementwise, Op::Sin)                             \
  UNARY(Cos)         PRIM(COS, "cos", 1, 1, elementwise, Op::Cos)                             \
  UNARY(Tan)         PRIM(TAN, "tan", 1, 1, unary, Op::Tan)                                   \
  UNARY(Tanh)        PRIM(TANH, "tanh", 1, 1, elementwise, Op::Tanh)                          \
  UNARY(Atan)        PRIM(ATAN, "atan", 1, 2, atan, Op::Atan)                                 \
  BINARY(Atan2)      /* (atan y x) */                                                         \
  BINARY(Pow)        PRIM(POW, "pow", 2, 2, binary, Op::Pow)                                  \
                     PRIM(EXPT, "expt", 2, 2, binary, Op::Pow)                                \
                     PRIM(SQUARE, "square", 1, 1, square, Op::Mul)                            \
  UNARY(Floor)       PRIM(FLOOR, "floor", 1, 1, unary, Op::Floor)                             \
  UNARY(Ceil)        PRIM(CEILING, "ceiling", 1, 1, unary, Op::Ceil)                          \
  UNARY(Round)       PRIM(ROUND, "round", 1, 1, unary, Op::Round)                             \
  UNARY(Trunc)       PRIM(TRUNCATE, "truncate", 1, 1, unary, Op::Trunc)                       \
  BINARY(Mod)        PRIM(MODULO, "modulo", 2, 2, binary, Op::Mod)                            \
  BINARY(Rem)        PRIM(REMAINDER, "remainder", 2, 2, binary, Op::Rem)                      \
  UNARY(Neg)         /* (- x) */                                                              \
  UNARY(SqrtRef)     /* the reference runtime's clamped sqrt and log (compat="reference") */  \
  UNARY(LogRef)                                                                               \
  OP(Select, Select) /* out = mask ? a : b; node.extra = mask id */                           \
  OP(Dot, Dot)       /* out = sum_i in[2i] * in[2i+1] (dot, vsum, trace, matvec, matmul) */   \
  OP(Inv, Linalg)    /* n x n matrix -> n*n outputs; extra = n */                             \
  OP(Det, Linalg)    /* n x n -> 1; extra = n */                                              \
  OP(LogDet, Linalg) /* n x n -> 1; extra = n */                                              \
  OP(Solve, Linalg)  /* (A n x n, B n x k) -> n*k outputs; extra = n, extra2 = k */

// Expanders that ignore their entry, to read some kinds of entry only.
#define NDVM_SKIP(...)

// Around a switch over the ops or their families: an op or family it leaves out is a compile
// error, not a warning (the switches have no default).
#define NDVM_COMPLETE_SWITCHES \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic error \"-Wswitch\"")
#define NDVM_END_COMPLETE_SWITCHES _Pragma("GCC diagnostic pop")

enum class Op : uint8_t {
#define NDVM_OP_ENUM(name, ...) name,
  NDVM_NUMERIC(NDVM_OP_ENUM, NDVM_OP_ENUM, NDVM_OP_ENUM, NDVM_SKIP)
#undef NDVM_OP_ENUM
};

// How the reverse sweep treats an op (sweep.hpp): one small function per family.
enum class OpFamily : uint8_t { Unary, Binary, Select, MinMax, Dot, Linalg };

NDVM_COMPLETE_SWITCHES
constexpr OpFamily op_family(Op op) {
  switch (op) {
#define NDVM_FAMILY_UNARY(name) case Op::name: return OpFamily::Unary;
#define NDVM_FAMILY_BINARY(name) case Op::name: return OpFamily::Binary;
#define NDVM_FAMILY_OP(name, family) case Op::name: return OpFamily::family;
    NDVM_NUMERIC(NDVM_FAMILY_UNARY, NDVM_FAMILY_BINARY, NDVM_FAMILY_OP, NDVM_SKIP)
#undef NDVM_FAMILY_UNARY
#undef NDVM_FAMILY_BINARY
#undef NDVM_FAMILY_OP
  }
  return OpFamily::Linalg;  // not reached: the switch names every op
}
NDVM_END_COMPLETE_SWITCHES

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

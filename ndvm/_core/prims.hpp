// The primitive table: every built-in procedure with its name, arity and implementation. Clients
// resolve names to ids once, when a program is analysed; at run time a primitive is a switch on its
// id, never a string comparison. Primitives throw Error without a position; the calling client adds
// the call's line:column.
#pragma once
#include <cmath>
#include <string>

#include "linalg.hpp"

namespace ndvm {

// The data primitives: lists and predicates here, vectors and matrices in arrays.hpp. The numeric
// primitives are the PRIM entries of NDVM_NUMERIC (tape.hpp); their ids come first.
#define NDVM_LIST_PRIMS(X)                                                                    \
  X(CONS, "cons", 2, 2) X(CAR, "car", 1, 1) X(CDR, "cdr", 1, 1) X(CADR, "cadr", 1, 1)        \
  X(CDDR, "cddr", 1, 1) X(CAAR, "caar", 1, 1) X(CADDR, "caddr", 1, 1) X(LIST, "list", 0, -1) \
  X(NULLP, "null?", 1, 1) X(PAIRP, "pair?", 1, 1) X(LENGTH, "length", 1, 1)                  \
  X(LISTREF, "list-ref", 2, 2) X(APPEND, "append", 0, -1) X(REVERSE, "reverse", 1, 1)        \
  X(NUMBERP, "number?", 1, 1) X(BOOLEANP, "boolean?", 1, 1) X(SYMBOLP, "symbol?", 1, 1)      \
  X(PROCEDUREP, "procedure?", 1, 1) X(ZEROP, "zero?", 1, 1) X(POSITIVEP, "positive?", 1, 1)  \
  X(NEGATIVEP, "negative?", 1, 1) X(NOT, "not", 1, 1) X(EQP, "eq?", 2, 2)                    \
  X(EQVP, "eqv?", 2, 2) X(EQUALP, "equal?", 2, 2) X(VECTORP, "vector?", 1, 1)                \
  X(MATRIXP, "matrix?", 1, 1)
#define NDVM_VECTOR_PRIMS(X)                                                                  \
  X(VEC, "vec", 0, -1) X(MAT, "mat", 1, -1) X(REF, "ref", 2, 3) X(DOT, "dot", 2, 2)          \
  X(CROSS, "cross", 2, 2) X(NORM, "norm", 1, 1) X(NORMALIZE, "normalize", 1, 1)              \
  X(VSUM, "vsum", 1, 1) X(VLEN, "vlen", 1, 1) X(SCALE, "scale", 2, 2)                        \
  X(MATVEC, "matvec", 2, 2) X(MATMUL, "matmul", 2, 2)
#define NDVM_MATRIX_PRIMS(X)                                                                  \
  X(TRANSPOSE, "transpose", 1, 1) X(TRACE, "trace", 1, 1) X(OUTER, "outer", 2, 2)            \
  X(DET, "det", 1, 1) X(LOGDET, "logdet", 1, 1) X(INV, "inv", 1, 1) X(SOLVE, "solve", 2, 2)  \
  X(EYE, "eye", 1, 1) X(ZEROS, "zeros", 1, 2) X(ONES, "ones", 1, 2)
#define NDVM_DATA_PRIMS(X) NDVM_LIST_PRIMS(X) NDVM_VECTOR_PRIMS(X) NDVM_MATRIX_PRIMS(X)

enum PrimId : int {
#define NDVM_PRIM_ENUM(id, ...) P_##id,
  NDVM_NUMERIC(NDVM_SKIP, NDVM_SKIP, NDVM_SKIP, NDVM_PRIM_ENUM)
  NDVM_DATA_PRIMS(NDVM_PRIM_ENUM)
#undef NDVM_PRIM_ENUM
  P_COUNT
};

struct PrimInfo {
  const char* name;
  int min_args, max_args;  // max -1: variadic
  const char* family;      // a numeric primitive's form (NDVM_NUMERIC), "data" for the others
};

inline const PrimInfo& prim_info(int id) {
  static const PrimInfo table[] = {
#define NDVM_NUMERIC_INFO(id, name, lo, hi, form, arg) {name, lo, hi, #form},
#define NDVM_DATA_INFO(id, name, lo, hi) {name, lo, hi, "data"},
      NDVM_NUMERIC(NDVM_SKIP, NDVM_SKIP, NDVM_SKIP, NDVM_NUMERIC_INFO)
      NDVM_DATA_PRIMS(NDVM_DATA_INFO)
#undef NDVM_NUMERIC_INFO
#undef NDVM_DATA_INFO
  };
  return table[id];
}

inline std::string arity_text(int n) {
  return std::to_string(n) + (n == 1 ? " argument" : " arguments");
}

// Throws FormError-free EvalError text for a wrong argument count, or returns normally.
inline void check_arity(int id, int n) {
  const PrimInfo& p = prim_info(id);
  if (n < p.min_args || (p.max_args >= 0 && n > p.max_args)) {
    std::string want;
    if (p.max_args < 0) want = "at least " + arity_text(p.min_args);
    else if (p.min_args == p.max_args) want = arity_text(p.min_args);
    else want = std::to_string(p.min_args) + " to " + arity_text(p.max_args);
    throw Error(ErrorKind::Eval, std::string(p.name) + ": expects " + want + ", got " +
                                     std::to_string(n));
  }
}

template <class T>
class Prims {
 public:
  explicit Prims(Machine<T>& m) : m(m) {}

  Value call(int id, const Value* a, int n) {
    switch (id) {
#define NDVM_NUMERIC_CALL(pid, name, lo, hi, form, arg) \
  case P_##pid: return call_##form(id, a, n, arg);
      NDVM_NUMERIC(NDVM_SKIP, NDVM_SKIP, NDVM_SKIP, NDVM_NUMERIC_CALL)
#undef NDVM_NUMERIC_CALL
#define NDVM_VECTOR_CALL(pid, ...) case P_##pid: return call_vector(id, a, n);
#define NDVM_MATRIX_CALL(pid, ...) case P_##pid: return call_matrix(id, a, n);
      NDVM_VECTOR_PRIMS(NDVM_VECTOR_CALL)
      NDVM_MATRIX_PRIMS(NDVM_MATRIX_CALL)
#undef NDVM_VECTOR_CALL
#undef NDVM_MATRIX_CALL

      case P_CONS: return m.cons(a[0], a[1]);
      case P_CAR: return m.cell(pair(a[0], id)).car;
      case P_CDR: return m.cell(pair(a[0], id)).cdr;
      case P_CADR: return car(cdr(a[0], "cadr"), "cadr");
      case P_CDDR: return cdr(cdr(a[0], "cddr"), "cddr");
      case P_CAAR: return car(car(a[0], "caar"), "caar");
      case P_CADDR: return car(cdr(cdr(a[0], "caddr"), "caddr"), "caddr");
      case P_LIST: return list(a, n, Value::nil());
      case P_NULLP: return Value::boolean(a[0].tag == Tag::Nil);
      case P_PAIRP: return Value::boolean(a[0].tag == Tag::Pair);
      case P_LENGTH: return Value::number(double(length(a[0], "length")));
      case P_LISTREF: {
        Value x = a[0];
        int64_t k = index(a[1], "list-ref", length(x, "list-ref"));
        for (int64_t i = 0; i < k; ++i) x = m.cell(x).cdr;
        return m.cell(x).car;
      }
      case P_APPEND: {
        if (n == 0) return Value::nil();
        Value tail = a[n - 1];
        for (int i = n - 2; i >= 0; --i) {
          length(a[i], "append");
          std::vector<Value> items;
          for (Value x = a[i]; x.tag == Tag::Pair; x = m.cell(x).cdr) items.push_back(m.cell(x).car);
          tail = list(items.data(), int(items.size()), tail);
        }
        return tail;
      }
      case P_REVERSE: {
        length(a[0], "reverse");
        Value r = Value::nil();
        for (Value x = a[0]; x.tag == Tag::Pair; x = m.cell(x).cdr) r = m.cons(m.cell(x).car, r);
        return r;
      }
      case P_NUMBERP: return Value::boolean(a[0].tag == Tag::Num);
      case P_BOOLEANP: return Value::boolean(a[0].tag == Tag::Bool);
      case P_SYMBOLP: return Value::boolean(a[0].tag == Tag::Sym);
      case P_PROCEDUREP: return Value::boolean(a[0].tag == Tag::Closure || a[0].tag == Tag::Prim);
      case P_VECTORP: return Value::boolean(a[0].tag == Tag::Vec);
      case P_MATRIXP: return Value::boolean(a[0].tag == Tag::Mat);
      case P_ZEROP: return m.compare(CMP_EQ, num(a[0], id), Value::number(0.0));
      case P_POSITIVEP: return m.compare(CMP_GT, num(a[0], id), Value::number(0.0));
      case P_NEGATIVEP: return m.compare(CMP_LT, num(a[0], id), Value::number(0.0));
      case P_NOT: return m.bool_not(a[0]);
      case P_EQP:
      case P_EQVP: return eqv(a[0], a[1]);
      case P_EQUALP: return equal(a[0], a[1]);
    }
    throw Error(ErrorKind::Internal, "unknown primitive id " + std::to_string(id));
  }

 private:
  Machine<T>& m;

  // Element i of the element heap as a pointer; i may be one past the end (an empty vector).
  const Value* elem(uint64_t i) const { return m.elems_.data() + i; }

  static std::string value_desc(const Value& v) {
    if (v.tag == Tag::Vec) return "a vector of length " + std::to_string(v.cols);
    if (v.tag == Tag::Mat) return "a " + std::to_string(v.rows) + "x" + std::to_string(v.cols) + " matrix";
    return tag_name(v.tag);
  }
  // i: the argument's index, 0 naming none (a primitive's first or only argument)
  static Error type_error(const char* who, const char* want, const Value& got, int i = 0) {
    return type_error_at(who, want, got, i == 0 ? -1 : i);
  }
  // at: the argument's index, -1 naming none
  static Error type_error_at(const char* who, const char* want, const Value& got, int at) {
    std::string pos = at < 0 ? "" : " (argument " + std::to_string(at + 1) + ")";
    return Error(ErrorKind::Eval, std::string(who) + ": expected " + want + pos + ", got " + value_desc(got));
  }
  [[noreturn]] static void shape_error(const char* who, const Value& a, const Value& b) {
    throw Error(ErrorKind::Eval, std::string(who) + ": shape mismatch between " + value_desc(a) +
                                     " and " + value_desc(b));
  }
  static void need_num(const Value& v, int id, int i = 0) {
    if (v.tag != Tag::Num) throw type_error(prim_info(id).name, "a number", v, i);
  }
  static const Value& num(const Value& v, int id, int i = 0) {
    need_num(v, id, i);
    return v;
  }
  static const Value& pair(const Value& v, int id) {
    if (v.tag != Tag::Pair) throw type_error(prim_info(id).name, "a pair", v);
    return v;
  }
  Value car(const Value& v, const char* who) {
    if (v.tag != Tag::Pair) throw type_error(who, "a pair", v);
    return m.cell(v).car;
  }
  Value cdr(const Value& v, const char* who) {
    if (v.tag != Tag::Pair) throw type_error(who, "a pair", v);
    return m.cell(v).cdr;
  }
  static Value vec(const Value& v, const char* who, int i = 0) {
    if (v.tag != Tag::Vec) throw type_error(who, "a vector", v, i);
    return v;
  }
  static Value matrix(const Value& v, const char* who, int i = 0) {
    if (v.tag != Tag::Mat) throw type_error(who, "a matrix", v, i);
    return v;
  }
  static Value array(const Value& v, const char* who, int i = 0) {
    if (v.tag != Tag::Vec && v.tag != Tag::Mat) throw type_error(who, "a vector or a matrix", v, i);
    return v;
  }
  static Value square(const Value& v, const char* who) {
    Value A = matrix(v, who);
    if (A.rows != A.cols)
      throw Error(ErrorKind::Eval, std::string(who) + ": expected a square matrix, got " + value_desc(A));
    return A;
  }

  // A non-negative integer that is the same in every lane, below `bound`.
  int64_t index(const Value& v, const char* who, int64_t bound, bool size = false) {
    if (v.tag != Tag::Num) throw type_error(who, size ? "a size" : "an index", v, size ? 0 : 1);
    if (v.varying())
      throw Error(ErrorKind::Eval, std::string(who) + ": " + (size ? "size" : "index") +
                                       " must not depend on data or parameters (it must be the "
                                       "same in every lane, however many there are)");
    double x = v.num;
    if (x != std::floor(x) || std::isnan(x))
      throw Error(ErrorKind::Eval, std::string(who) + ": " + (size ? "size" : "index") +
                                       " must be an integer, got " + format_number(x));
    if (x < 0 || x >= double(bound) || (size && x == 0 && false))
      throw Error(ErrorKind::Eval, std::string(who) + ": " + (size ? "size " : "index ") +
                                       (std::fabs(x) < 1e15 ? std::to_string(int64_t(x)) : format_number(x)) +
                                       " out of range" +
                                       (size ? " (0 to " + std::to_string(bound - 1) + ")"
                                             : " for length " + std::to_string(bound)));
    return int64_t(x);
  }

  int64_t length(const Value& v, const char* who) {
    int64_t k = 0;
    Value x = v;
    while (x.tag == Tag::Pair) {
      x = m.cell(x).cdr;
      ++k;
    }
    if (x.tag != Tag::Nil) throw type_error(who, "a proper list", v);
    return k;
  }

  Value list(const Value* a, int n, Value tail) {
    for (int i = n - 1; i >= 0; --i) tail = m.cons(a[i], tail);
    return tail;
  }

  // The vector and matrix primitives and their helpers (arrays.hpp).
  Value call_vector(int id, const Value* a, int n);
  Value call_matrix(int id, const Value* a, int n);
  Value pack_vec(const Value* xs, uint32_t n);
  Value make_vec(const Value* a, int n);
  Value make_mat(const Value* a, int n, const char* who);
  Value ref(const Value* a, int n);
  Value self_dot(const Value& v);
  Value matvec(const Value& M, const Value& v);
  Value matmul(const Value& A, const Value& B);
  Value cross(const Value* a);
  Value transpose(const Value& a);
  Value outer(const Value* a);
  Value solve(const Value* a);
  Value filled(int id, const Value* a, int n);

  // Elementwise arithmetic with scalar broadcasting on either side; ia and ib: the form's
  // argument indices of a and b, for an error (-1: not an argument, the sum so far).
  Value arith(Op op, const Value& a, const Value& b, const char* who, int ia = -1, int ib = 1) {
    if (a.tag == Tag::Num && b.tag == Tag::Num) return m.binary(op, a, b);
    bool aa = a.tag == Tag::Vec || a.tag == Tag::Mat, ba = b.tag == Tag::Vec || b.tag == Tag::Mat;
    if (!aa && a.tag != Tag::Num) throw type_error_at(who, "a number, vector or matrix", a, ia);
    if (!ba && b.tag != Tag::Num) throw type_error_at(who, "a number, vector or matrix", b, ib);
    if (aa && ba && (a.tag != b.tag || a.rows != b.rows || a.cols != b.cols)) shape_error(who, a, b);
    const Value& shape = aa ? a : b;
    uint32_t cnt = shape.size();
    uint64_t s = m.alloc_elems(cnt);
    for (uint32_t i = 0; i < cnt; ++i) {
      Value x = aa ? m.elems_[a.id + i] : a;
      Value y = ba ? m.elems_[b.id + i] : b;
      if (x.tag != Tag::Num || y.tag != Tag::Num) throw type_error(who, "numeric elements", x.tag != Tag::Num ? x : y);
      Value r = m.binary(op, x, y);
      m.elems_[s + i] = r;
    }
    Value r = shape;
    r.id = s;
    return r;
  }

  Value arith_unary(Op op, const Value& a, const char* who) {
    if (a.tag == Tag::Num) return m.unary(op, a);
    if (a.tag != Tag::Vec && a.tag != Tag::Mat) throw type_error(who, "a number, vector or matrix", a);
    uint32_t cnt = a.size();
    uint64_t s = m.alloc_elems(cnt);
    for (uint32_t i = 0; i < cnt; ++i) {
      Value x = m.elems_[a.id + i];
      Value r = m.unary(op, x);
      m.elems_[s + i] = r;
    }
    Value r = a;
    r.id = s;
    return r;
  }

  // The forms of the numeric primitives (PRIM entries of NDVM_NUMERIC, tape.hpp).
  Value call_arith(int id, const Value* a, int n, Op op) {
    const char* who = prim_info(id).name;
    if (n == 1 && op == Op::Sub) return arith_unary(Op::Neg, a[0], who);
    if (n == 1 && op == Op::Div) return arith(Op::Div, Value::number(1.0), a[0], who, -1, 0);
    if (n == 0) return Value::number(op == Op::Mul ? 1.0 : 0.0);  // (+), (*); - and / need one
    if (n == 1) {
      if (a[0].tag != Tag::Num && a[0].tag != Tag::Vec && a[0].tag != Tag::Mat)
        throw type_error(who, "a number, vector or matrix", a[0]);
      return a[0];
    }
    Value acc = arith(op, a[0], a[1], who, 0, 1);
    for (int i = 2; i < n; ++i) acc = arith(op, acc, a[i], who, -1, i);
    return acc;
  }
  Value call_compare(int id, const Value* a, int n, int cmp) {
    return chain(cmp, a, n, prim_info(id).name);
  }
  Value call_minmax(int id, const Value* a, int n, Op op) {
    for (int i = 0; i < n; ++i) need_num(a[i], id, i);
    return m.minmax(op == Op::Max, a, n);
  }
  Value call_unary(int id, const Value* a, int, Op op) { return m.unary(op, num(a[0], id)); }
  Value call_elementwise(int id, const Value* a, int, Op op) {
    return arith_unary(op, a[0], prim_info(id).name);
  }
  Value call_binary(int id, const Value* a, int, Op op) {
    return m.binary(op, num(a[0], id), num(a[1], id, 1));
  }
  Value call_atan(int id, const Value* a, int n, Op op) {
    if (n == 2) return m.binary(Op::Atan2, num(a[0], id), num(a[1], id, 1));
    return m.unary(op, num(a[0], id));
  }
  Value call_square(int id, const Value* a, int, Op op) {
    return arith(op, a[0], a[0], prim_info(id).name);
  }

  Value chain(int cmp, const Value* a, int n, const char* who) {
    for (int i = 0; i < n; ++i)
      if (a[i].tag != Tag::Num) throw type_error(who, "a number", a[i], i);
    Value r = Value::boolean(true);
    for (int i = 0; i + 1 < n; ++i) r = m.bool_and(r, m.compare(cmp, a[i], a[i + 1]));
    return r;
  }

  Value eqv(const Value& a, const Value& b) {
    if (a.tag != b.tag) return Value::boolean(false);
    switch (a.tag) {
      case Tag::Num: return m.compare(CMP_EQ, a, b);
      case Tag::Bool:
        if (!a.varying() && !b.varying()) return Value::boolean(a.num == b.num);
        return m.bool_not(xor_(a, b));
      case Tag::Nil:
      case Tag::Unspec: return Value::boolean(true);
      case Tag::Prim: return Value::boolean(a.cols == b.cols);
      case Tag::Closure: return Value::boolean(a.ptr == b.ptr);
      case Tag::Vec:
      case Tag::Mat: return Value::boolean(a.id == b.id && a.rows == b.rows && a.cols == b.cols);
      default: return Value::boolean(a.id == b.id);
    }
  }

  // lanes where a and b differ (two booleans)
  Value xor_(const Value& a, const Value& b) {
    int32_t id = m.new_mask();
    uint8_t* y = m.mask_ptr(id);
    for (uint32_t l = 0; l < m.L_; ++l) {
      bool u = a.varying() ? m.mask_ptr(int32_t(a.id))[l] : a.num != 0.0;
      bool v = b.varying() ? m.mask_ptr(int32_t(b.id))[l] : b.num != 0.0;
      y[l] = u != v;
    }
    return Value::mask(uint64_t(id));
  }

  Value equal(const Value& a, const Value& b) {
    check_native_stack(ErrorKind::Limit, "equal?: data");
    if (a.tag != b.tag) return Value::boolean(false);
    if (a.tag == Tag::Pair) {
      Value r = Value::boolean(true);
      Value x = a, y = b;
      while (x.tag == Tag::Pair && y.tag == Tag::Pair) {
        if (x.id == y.id) return r;
        Value cx = m.cell(x).car, cy = m.cell(y).car;
        r = m.bool_and(r, equal(cx, cy));
        if (r.is_false()) return r;
        x = m.cell(x).cdr;
        y = m.cell(y).cdr;
      }
      return m.bool_and(r, equal(x, y));
    }
    if (a.tag == Tag::Vec || a.tag == Tag::Mat) {
      if (a.rows != b.rows || a.cols != b.cols) return Value::boolean(false);
      Value r = Value::boolean(true);
      for (uint32_t i = 0; i < a.size(); ++i) {
        Value x = m.elems_[a.id + i], y = m.elems_[b.id + i];
        r = m.bool_and(r, eqv(x, y));
      }
      return r;
    }
    return eqv(a, b);
  }
};

}  // namespace ndvm

#include "arrays.hpp"

namespace ndvm {

template <class T>
inline Value call_prim(Machine<T>& m, int id, const Value* args, int n) {
  return Prims<T>(m).call(id, args, n);
}

}  // namespace ndvm

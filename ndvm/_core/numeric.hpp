// Numeric operations over lanes and their reverse sweep. Uniform inputs give uniform results
// (never broadcast); varying inputs give a new payload; an active input records one tape node.
// Lane loops are written with the uniform/varying cases split so the compiler vectorizes them.
#pragma once
#include <cmath>

#include "machine.hpp"
#include "kernels.hpp"
#include "vmath.hpp"

namespace ndvm {

namespace detail {

template <class T>
struct Recorder {
  Machine<T>& m;
  Operand operand(const Value& v) {
    if (!v.varying()) {
      m.grow(m.consts_, m.consts_.size() + 1);
      m.consts_.push_back(T(v.num));
      return {uint32_t(m.consts_.size() - 1), OPND_CONST};
    }
    return {uint32_t(v.id), uint8_t(v.active() ? OPND_ACTIVE : OPND_PAYLOAD)};
  }
  void record(Op op, const Value* ins, uint32_t nin, uint32_t out, uint32_t nout,
              uint32_t extra = 0, uint32_t extra2 = 0) {
    TapeNode n;
    n.op = op;
    n.nin = nin;
    n.mask = m.live_;
    n.out = out;
    n.nout = nout;
    n.in = uint32_t(m.operands_.size());
    n.extra = extra;
    n.extra2 = extra2;
    m.grow(m.operands_, m.operands_.size() + nin);
    for (uint32_t i = 0; i < nin; ++i) m.operands_.push_back(operand(ins[i]));
    m.grow(m.nodes_, m.nodes_.size() + 1);
    m.nodes_.push_back(n);
  }
};

// Dense per-lane linear algebra on a row-major n x n matrix (partial pivoting).
template <class T>
T det_dense(const T* a, uint32_t n, T* work) {
  if (n == 1) return a[0];
  if (n == 2) return a[0] * a[3] - a[1] * a[2];
  if (n == 3)
    return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
           a[2] * (a[3] * a[7] - a[4] * a[6]);
  std::copy(a, a + n * n, work);
  T det = T(1);
  for (uint32_t c = 0; c < n; ++c) {
    uint32_t p = c;
    for (uint32_t r = c + 1; r < n; ++r)
      if (std::fabs(work[r * n + c]) > std::fabs(work[p * n + c])) p = r;
    if (p != c) {
      for (uint32_t j = 0; j < n; ++j) std::swap(work[c * n + j], work[p * n + j]);
      det = -det;
    }
    T piv = work[c * n + c];
    det *= piv;
    if (piv == T(0)) return det;
    for (uint32_t r = c + 1; r < n; ++r) {
      T f = work[r * n + c] / piv;
      for (uint32_t j = c; j < n; ++j) work[r * n + j] -= f * work[c * n + j];
    }
  }
  return det;
}

// y = inverse of the n x n matrix a (Gauss-Jordan with partial pivoting). work: 2 n^2.
template <class T>
void inv_dense(const T* a, uint32_t n, T* y, T* work) {
  if (n == 1) {
    y[0] = T(1) / a[0];
    return;
  }
  if (n == 2) {
    T d = a[0] * a[3] - a[1] * a[2];
    y[0] = a[3] / d;
    y[1] = -a[1] / d;
    y[2] = -a[2] / d;
    y[3] = a[0] / d;
    return;
  }
  T* w = work;
  std::copy(a, a + n * n, w);
  for (uint32_t i = 0; i < n * n; ++i) y[i] = T(0);
  for (uint32_t i = 0; i < n; ++i) y[i * n + i] = T(1);
  for (uint32_t c = 0; c < n; ++c) {
    uint32_t p = c;
    for (uint32_t r = c + 1; r < n; ++r)
      if (std::fabs(w[r * n + c]) > std::fabs(w[p * n + c])) p = r;
    if (p != c)
      for (uint32_t j = 0; j < n; ++j) {
        std::swap(w[c * n + j], w[p * n + j]);
        std::swap(y[c * n + j], y[p * n + j]);
      }
    T piv = w[c * n + c];
    for (uint32_t j = 0; j < n; ++j) {
      w[c * n + j] /= piv;
      y[c * n + j] /= piv;
    }
    for (uint32_t r = 0; r < n; ++r) {
      if (r == c) continue;
      T f = w[r * n + c];
      if (f == T(0)) continue;
      for (uint32_t j = 0; j < n; ++j) {
        w[r * n + j] -= f * w[c * n + j];
        y[r * n + j] -= f * y[c * n + j];
      }
    }
  }
}

}  // namespace detail


template <class T>
Value Machine<T>::unary(Op op, const Value& a) {
  if (compat_ref_) {
    if (op == Op::Sqrt) op = Op::SqrtRef;
    if (op == Op::Log) op = Op::LogRef;
  }
  if (!a.varying()) return Value::number(double(Scalar<T>::unary(op, T(a.num))));
  uint32_t out = alloc_payloads(1);
  const T* x = pay(a.id);
  T* y = pay(out);
  switch (op) {  // the common kernels get their own loops so they vectorize
    case Op::Neg: for (uint32_t l = 0; l < L_; ++l) y[l] = -x[l]; break;
    case Op::Exp: vmath::apply(vmath::Fn::Exp, x, y, L_); break;
    case Op::Log: vmath::apply(vmath::Fn::Log, x, y, L_); break;
    case Op::Sin: vmath::apply(vmath::Fn::Sin, x, y, L_); break;
    case Op::Cos: vmath::apply(vmath::Fn::Cos, x, y, L_); break;
    case Op::Sqrt: for (uint32_t l = 0; l < L_; ++l) y[l] = std::sqrt(x[l]); break;
    default: for (uint32_t l = 0; l < L_; ++l) y[l] = Scalar<T>::unary(op, x[l]); break;
  }
  bool act = a.active() && recording_;
  if (act) detail::Recorder<T>{*this}.record(op, &a, 1, out, 1);
  return Value::payload(out, act);
}

template <class T>
Value Machine<T>::binary(Op op, const Value& a, const Value& b) {
  if (!a.varying() && !b.varying())
    return Value::number(double(Scalar<T>::binary(op, T(a.num), T(b.num))));
  // Identities with a uniform 0 or 1 (identity and zero matrix elements, scalings) return an
  // operand, or a uniform zero, instead of a new payload and tape node — only where IEEE gives
  // the very same bits on every lane.
  if (Value r; fold_identity(op, a, b, r)) return r;
  uint32_t out = alloc_payloads(1);
  T ta, tb;
  size_t sa, sb;
  const T* x = lanes_of(a, ta, sa);
  const T* z = lanes_of(b, tb, sb);
  T* y = pay(out);
  switch (op) {  // the four arithmetic operators run the per-ISA kernels (kernels.hpp)
    case Op::Add: kern::arith(kern::K_ADD, y, x, sa, z, sb, L_); break;
    case Op::Sub: kern::arith(kern::K_SUB, y, x, sa, z, sb, L_); break;
    case Op::Mul: kern::arith(kern::K_MUL, y, x, sa, z, sb, L_); break;
    case Op::Div: kern::arith(kern::K_DIV, y, x, sa, z, sb, L_); break;
    default:
      for (uint32_t l = 0; l < L_; ++l) y[l] = Scalar<T>::binary(op, x[l * sa], z[l * sb]);
      break;
  }
  bool act = (a.active() || b.active()) && recording_;
  if (act) {
    Value ins[2] = {a, b};
    detail::Recorder<T>{*this}.record(op, ins, 2, out, 1);
  }
  return Value::payload(out, act);
}

template <class T>
bool Machine<T>::fold_identity(Op op, const Value& a, const Value& b, Value& r) {
  auto is = [](const Value& v, double c) { return !v.varying() && v.num == c && !std::signbit(v.num); };
  // x * 1, 1 * x, x / 1, x - 0: exactly x for every x (nan and -0 included)
  if ((op == Op::Mul && is(b, 1.0)) || (op == Op::Div && is(b, 1.0)) ||
      (op == Op::Sub && is(b, 0.0))) {
    r = a;
    return true;
  }
  if (op == Op::Mul && is(a, 1.0)) {
    r = b;
    return true;
  }
  // x + 0 and 0 + x: x, unless some lane of x is -0 (then -0 + 0 = +0)
  if (op == Op::Add && (is(a, 0.0) || is(b, 0.0))) {
    const Value& x = is(b, 0.0) ? a : b;
    if (kern::any_negative_zero(pay(x.id), L_)) return false;
    r = x;
    return true;
  }
  // x * 0 and 0 * x: a uniform zero when every lane of x is finite with one sign
  if (op == Op::Mul && (is(a, 0.0) || is(b, 0.0))) {
    const Value& x = is(b, 0.0) ? a : b;
    bool neg;
    if (!kern::all_finite_one_sign(pay(x.id), L_, &neg)) return false;
    r = Value::number(neg ? -0.0 : 0.0);
    return true;
  }
  return false;
}

template <class T>
Value Machine<T>::compare(int cmp, const Value& a, const Value& b) {
  auto f = [cmp](T u, T v) -> bool {
    switch (cmp) {
      case 0: return u == v;
      case 1: return u < v;
      case 2: return u > v;
      case 3: return u <= v;
      default: return u >= v;
    }
  };
  if (!a.varying() && !b.varying()) return Value::boolean(f(T(a.num), T(b.num)));
  int32_t id = new_mask();
  T ta, tb;
  size_t sa, sb;
  const T* x = lanes_of(a, ta, sa);
  const T* z = lanes_of(b, tb, sb);
  uint8_t* m = mask_ptr(id);
  for (uint32_t l = 0; l < L_; ++l) m[l] = f(x[l * sa], z[l * sb]);
  return Value::mask(uint64_t(id));
}

template <class T>
Value Machine<T>::bool_and(const Value& a, const Value& b) {
  if (!a.varying() && !b.varying()) return Value::boolean(a.num != 0.0 && b.num != 0.0);
  if (!a.varying()) return a.num != 0.0 ? b : a;
  if (!b.varying()) return b.num != 0.0 ? a : b;
  int32_t id = new_mask();
  const uint8_t* x = mask_ptr(int32_t(a.id));
  const uint8_t* z = mask_ptr(int32_t(b.id));
  uint8_t* m = mask_ptr(id);
  for (uint32_t l = 0; l < L_; ++l) m[l] = x[l] & z[l];
  return Value::mask(uint64_t(id));
}

template <class T>
Value Machine<T>::bool_not(const Value& a) {
  if (a.tag != Tag::Bool) return Value::boolean(false);
  if (!a.varying()) return Value::boolean(a.num == 0.0);
  int32_t id = new_mask();
  const uint8_t* x = mask_ptr(int32_t(a.id));
  uint8_t* m = mask_ptr(id);
  for (uint32_t l = 0; l < L_; ++l) m[l] = !x[l];
  return Value::mask(uint64_t(id));
}

template <class T>
Value Machine<T>::select(int32_t mask, const Value& a, const Value& b) {
  auto diverge = [&]() -> Divergence {
    const uint8_t* m = mask_ptr(mask);
    return Divergence{std::vector<uint8_t>(m, m + L_)};
  };
  if (a.tag != b.tag) throw diverge();
  check_native_stack(ErrorKind::Limit, "data merged at a divergent branch");
  switch (a.tag) {
    case Tag::Num: {
      if (!a.varying() && !b.varying() && a.num == b.num) return a;
      if (a.varying() && b.varying() && a.id == b.id) return a;
      uint32_t out = alloc_payloads(1);
      T ta, tb;
      size_t sa, sb;
      const T* x = lanes_of(a, ta, sa);
      const T* z = lanes_of(b, tb, sb);
      const uint8_t* m = mask_ptr(mask);
      T* y = pay(out);
      for (uint32_t l = 0; l < L_; ++l) y[l] = m[l] ? x[l * sa] : z[l * sb];
      bool act = (a.active() || b.active()) && recording_;
      if (act) {
        Value ins[2] = {a, b};
        detail::Recorder<T>{*this}.record(Op::Select, ins, 2, out, 1, uint32_t(mask));
      }
      return Value::payload(out, act);
    }
    case Tag::Bool: {
      if (!a.varying() && !b.varying() && a.num == b.num) return a;
      int32_t id = new_mask();
      const uint8_t* m = mask_ptr(mask);
      uint8_t* y = mask_ptr(id);
      for (uint32_t l = 0; l < L_; ++l) {
        bool u = a.varying() ? mask_ptr(int32_t(a.id))[l] : a.num != 0.0;
        bool v = b.varying() ? mask_ptr(int32_t(b.id))[l] : b.num != 0.0;
        y[l] = m[l] ? u : v;
      }
      return Value::mask(uint64_t(id));
    }
    case Tag::Nil:
    case Tag::Unspec: return a;
    case Tag::Sym:
    case Tag::Pair:
      if (a.id == b.id) return a;
      if (a.tag == Tag::Sym) throw diverge();
      {
        // same-shaped lists merge element by element (iterative along the spine)
        std::vector<Value> cars;
        Value x = a, z = b;
        while (x.tag == Tag::Pair && z.tag == Tag::Pair && x.id != z.id) {
          Value ca = pairs_[x.id].car, cb = pairs_[z.id].car;
          cars.push_back(select(mask, ca, cb));
          x = pairs_[x.id].cdr;
          z = pairs_[z.id].cdr;
        }
        Value tail = (x.tag == Tag::Pair && z.tag == Tag::Pair) ? x : select(mask, x, z);
        for (size_t i = cars.size(); i-- > 0;) tail = cons(cars[i], tail);
        return tail;
      }
    case Tag::Prim:
      if (a.cols == b.cols) return a;
      throw diverge();
    case Tag::Closure:
      if (a.ptr == b.ptr) return a;
      throw diverge();
    case Tag::Vec:
    case Tag::Mat: {
      if (a.rows != b.rows || a.cols != b.cols) throw diverge();
      if (a.id == b.id) return a;
      uint32_t n = a.size();
      uint64_t start = alloc_elems(n);
      for (uint32_t i = 0; i < n; ++i) {
        Value e = select(mask, elems_[a.id + i], elems_[b.id + i]);
        elems_[start + i] = e;
      }
      Value r = a;
      r.id = start;
      return r;
    }
  }
  throw diverge();
}

template <class T>
Value Machine<T>::minmax(bool is_max, const Value* xs, int n) {
  bool any_varying = false, act = false;
  for (int i = 0; i < n; ++i) {
    any_varying |= xs[i].varying();
    act |= xs[i].active();
  }
  auto better = [is_max](T u, T best) { return is_max ? u > best : u < best; };
  if (!any_varying) {
    T best = T(xs[0].num);
    for (int i = 1; i < n; ++i)
      if (better(T(xs[i].num), best) || std::isnan(T(xs[i].num))) best = T(xs[i].num);
    return Value::number(double(best));
  }
  uint32_t out = alloc_payloads(1);
  T* y = pay(out);
  for (uint32_t l = 0; l < L_; ++l) y[l] = lane(xs[0], l);
  for (int i = 1; i < n; ++i)
    for (uint32_t l = 0; l < L_; ++l) {
      T u = lane(xs[i], l);
      if (better(u, y[l]) || std::isnan(u)) y[l] = u;
    }
  act = act && recording_;
  if (act)
    detail::Recorder<T>{*this}.record(is_max ? Op::Max : Op::Min, xs, uint32_t(n), out, 1);
  return Value::payload(out, act);
}

template <class T>
Value Machine<T>::dot(const Value* a, const Value* b, uint32_t n) {
  bool any_varying = false, act = false;
  for (uint32_t i = 0; i < n; ++i) {
    any_varying |= a[i].varying() || b[i].varying();
    act |= a[i].active() || b[i].active();
  }
  if (!any_varying) {
    T s = T(0);
    for (uint32_t i = 0; i < n; ++i) s += T(a[i].num) * T(b[i].num);
    return Value::number(double(s));
  }
  uint32_t out = alloc_payloads(1);
  T* y = pay(out);
  std::fill(y, y + L_, T(0));
  for (uint32_t i = 0; i < n; ++i) {
    T ta, tb;
    size_t sa, sb;
    const T* x = lanes_of(a[i], ta, sa);
    const T* z = lanes_of(b[i], tb, sb);
    kern::fma_lanes(y, x, sa, z, sb, L_);
  }
  act = act && recording_;
  if (act) {
    std::vector<Value> ins(2 * n);
    for (uint32_t i = 0; i < n; ++i) {
      ins[2 * i] = a[i];
      ins[2 * i + 1] = b[i];
    }
    detail::Recorder<T>{*this}.record(Op::Dot, ins.data(), 2 * n, out, 1);
  }
  return Value::payload(out, act);
}

template <class T>
void Machine<T>::linalg(Op op, const Value* a, uint32_t n, const Value* b, uint32_t k, Value* out) {
  uint32_t nin = n * n + (op == Op::Solve ? n * k : 0);
  uint32_t nout = op == Op::Inv ? n * n : (op == Op::Solve ? n * k : 1);
  bool any_varying = false, act = false;
  std::vector<Value> ins(nin);
  for (uint32_t i = 0; i < n * n; ++i) ins[i] = a[i];
  if (op == Op::Solve)
    for (uint32_t i = 0; i < n * k; ++i) ins[n * n + i] = b[i];
  for (const Value& v : ins) {
    any_varying |= v.varying();
    act |= v.active();
  }
  act = act && recording_;
  if (n == 2 && any_varying && op != Op::Solve) {
    // 2x2 closed forms, vectorized across lanes (the state-space case: Kalman filters)
    uint32_t first = alloc_payloads(nout);
    T c0, c1, c2, c3;
    size_t s0, s1, s2, s3;
    const T* A0 = lanes_of(ins[0], c0, s0);
    const T* A1 = lanes_of(ins[1], c1, s1);
    const T* A2 = lanes_of(ins[2], c2, s2);
    const T* A3 = lanes_of(ins[3], c3, s3);
    if (op == Op::Inv) {
      T* y0 = pay(first);
      T* y1 = pay(first + 1);
      T* y2 = pay(first + 2);
      T* y3 = pay(first + 3);
      for (uint32_t l = 0; l < L_; ++l) {
        T a = A0[l * s0], b = A1[l * s1], c = A2[l * s2], d = A3[l * s3];
        T det = a * d - b * c;
        y0[l] = d / det;
        y1[l] = -b / det;
        y2[l] = -c / det;
        y3[l] = a / det;
      }
    } else {
      T* y = pay(first);
      for (uint32_t l = 0; l < L_; ++l)
        y[l] = A0[l * s0] * A3[l * s3] - A1[l * s1] * A2[l * s2];
      if (op == Op::LogDet) vmath::log_lanes(y, y, L_);
    }
    for (uint32_t i = 0; i < nout; ++i) out[i] = Value::payload(first + i, act);
    if (act) detail::Recorder<T>{*this}.record(op, ins.data(), nin, first, nout, n, k);
    return;
  }
  uint32_t lanes = any_varying ? L_ : 1;
  uint32_t first = any_varying ? alloc_payloads(nout) : 0;
  std::vector<T> A(n * n), B(op == Op::Solve ? n * k : 0), Y(nout), W(2 * n * n + n * k);
  for (uint32_t l = 0; l < lanes; ++l) {
    for (uint32_t i = 0; i < n * n; ++i) A[i] = lane(ins[i], l);
    switch (op) {
      case Op::Inv: detail::inv_dense(A.data(), n, Y.data(), W.data()); break;
      case Op::Det: Y[0] = detail::det_dense(A.data(), n, W.data()); break;
      case Op::LogDet: Y[0] = vmath::one(vmath::Fn::Log, detail::det_dense(A.data(), n, W.data())); break;
      case Op::Solve: {
        T* Ai = W.data() + n * n;
        detail::inv_dense(A.data(), n, Ai, W.data());
        for (uint32_t i = 0; i < n * k; ++i) B[i] = lane(ins[n * n + i], l);
        for (uint32_t r = 0; r < n; ++r)
          for (uint32_t c = 0; c < k; ++c) {
            T s = T(0);
            for (uint32_t j = 0; j < n; ++j) s += Ai[r * n + j] * B[j * k + c];
            Y[r * k + c] = s;
          }
        break;
      }
      default: break;
    }
    if (!any_varying) {
      for (uint32_t i = 0; i < nout; ++i) out[i] = Value::number(double(Y[i]));
      return;
    }
    for (uint32_t i = 0; i < nout; ++i) pay(first + i)[l] = Y[i];
  }
  for (uint32_t i = 0; i < nout; ++i) out[i] = Value::payload(first + i, act);
  if (act) detail::Recorder<T>{*this}.record(op, ins.data(), nin, first, nout, n, k);
}


// The reverse sweep: seeds the output's adjoint (ones when seed is null) and walks the tape back.
// Each node's lane loop is unit-stride (uniform operands are broadcast into scratch first) so it
// vectorizes; a zero upstream adjoint contributes exactly zero (never 0 * inf = nan); nodes
// recorded under a lane mask accumulate only on that mask's lanes.
template <class T>
void Machine<T>::reverse(const Value& outv, const T* seed) {
  size_t total = size_t(npay_) * L_;
  grow(adj_, total);
  adj_.assign(total, T(0));
  if (!(outv.tag == Tag::Num && outv.active())) return;
  T* g0 = adj_.data() + size_t(outv.id) * L_;
  for (uint32_t l = 0; l < L_; ++l) g0[l] = seed ? seed[l] : T(1);
  const uint32_t L = L_;
  if (scratch_.size() < 2 * size_t(L)) scratch_.resize(2 * size_t(L));
  std::vector<T> A, Y, G, W, GA;
  for (size_t k = nodes_.size(); k-- > 0;) {
    const TapeNode& nd = nodes_[k];
    const Operand* in = operands_.data() + nd.in;
    const uint8_t* live = nd.mask >= 0 ? mask_ptr(nd.mask) : nullptr;
    // lanes of operand i (uniform ones broadcast into scratch slot j)
    auto vals = [&](const Operand& o, int j) -> const T* {
      if (o.kind != OPND_CONST) return pay(o.id);
      T* b = scratch_.data() + size_t(j) * L;
      std::fill(b, b + L, consts_[o.id]);
      return b;
    };
    auto acc = [&](const Operand& o) -> T* {
      return o.kind == OPND_ACTIVE ? adj_.data() + size_t(o.id) * L_ : nullptr;
    };
    auto operand_lanes = [&](const Operand& o, T& c, size_t& stride) -> const T* {
      if (o.kind == OPND_CONST) {
        c = consts_[o.id];
        stride = 0;
        return &c;
      }
      stride = 1;
      return pay(o.id);
    };
    auto val = [&](const Operand& o, uint32_t l) -> T {
      return o.kind == OPND_CONST ? consts_[o.id] : pay(o.id)[l];
    };
    const T* g = adj_.data() + size_t(nd.out) * L_;
    const T* y = pay(nd.out);
// dst[l] += g[l] * (EXPR), skipping zero upstream adjoints and lanes outside the node's mask
#define NDVM_ACC(dst, EXPR)                                                            \
  do {                                                                                 \
    T* d_ = (dst);                                                                     \
    if (!d_) break;                                                                    \
    if (live) {                                                                        \
      for (uint32_t l = 0; l < L; ++l)                                                 \
        if (live[l] && g[l] != T(0)) d_[l] += g[l] * (EXPR);                           \
    } else {                                                                           \
      for (uint32_t l = 0; l < L; ++l) {                                               \
        T v_ = g[l] * (EXPR);                                                          \
        d_[l] += g[l] == T(0) ? T(0) : v_;                                             \
      }                                                                                \
    }                                                                                  \
  } while (0)
    if (op_is_unary(nd.op)) {
      T* ga = acc(in[0]);
      if (!ga) continue;
      const T* x = vals(in[0], 0);
      switch (nd.op) {
        case Op::Neg: kern::acc_plus(ga, g, T(-1), live, L); break;
        case Op::Exp: kern::acc_times(ga, g, y, 1, live, L); break;  // d exp = exp
        case Op::Log: NDVM_ACC(ga, T(1) / x[l]); break;
        case Op::Sqrt: NDVM_ACC(ga, T(0.5) / y[l]); break;
        case Op::Square: NDVM_ACC(ga, T(2) * x[l]); break;
        case Op::Tanh: NDVM_ACC(ga, T(1) - y[l] * y[l]); break;
        case Op::Tan: NDVM_ACC(ga, T(1) + y[l] * y[l]); break;
        case Op::Sin:
        case Op::Cos: {
          // d sin = cos, d cos = -sin: through the vector kernels, into scratch slot 1
          T* d = scratch_.data() + L;
          vmath::apply(nd.op == Op::Sin ? vmath::Fn::Cos : vmath::Fn::Sin, x, d, L);
          if (nd.op == Op::Cos)
            for (uint32_t l = 0; l < L; ++l) d[l] = -d[l];
          kern::acc_times(ga, g, d, 1, live, L);
          break;
        }
        default: NDVM_ACC(ga, Scalar<T>::dunary(nd.op, x[l], y[l])); break;
      }
      continue;
    }
    switch (nd.op) {
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
      case Op::Pow: case Op::Atan2: case Op::Mod: case Op::Rem: {
        T* ga = acc(in[0]);
        T* gb = acc(in[1]);
        if (nd.op == Op::Add || nd.op == Op::Sub || nd.op == Op::Mul) {
          switch (nd.op) {
          case Op::Add:
            if (ga) kern::acc_plus(ga, g, T(1), live, L);
            if (gb) kern::acc_plus(gb, g, T(1), live, L);
            break;
          case Op::Sub:
            if (ga) kern::acc_plus(ga, g, T(1), live, L);
            if (gb) kern::acc_plus(gb, g, T(-1), live, L);
            break;
          case Op::Mul: {
            T ca, cb;
            size_t sa, sb;
            const T* pa = operand_lanes(in[0], ca, sa);
            const T* pb = operand_lanes(in[1], cb, sb);
            if (ga) kern::acc_times(ga, g, pb, sb, live, L);
            if (gb) kern::acc_times(gb, g, pa, sa, live, L);
            break;
          }
          default: break;
          }
          break;
        }
        const T* a = vals(in[0], 0);
        const T* b = vals(in[1], 1);
        switch (nd.op) {
          case Op::Div: NDVM_ACC(ga, T(1) / b[l]); NDVM_ACC(gb, -y[l] / b[l]); break;
          default:
            for (uint32_t l = 0; l < L; ++l) {
              if (g[l] == T(0) || (live && !live[l])) continue;
              T da, db;
              Scalar<T>::dbinary(nd.op, a[l], b[l], y[l], da, db);
              if (ga) ga[l] += g[l] * da;
              if (gb) gb[l] += g[l] * db;
            }
        }
        break;
      }
      case Op::Select: {
        const uint8_t* m = mask_ptr(int32_t(nd.extra));
        T* ga = acc(in[0]);
        T* gb = acc(in[1]);
        for (uint32_t l = 0; l < L; ++l) {
          if (live && !live[l]) continue;
          if (m[l]) {
            if (ga) ga[l] += g[l];
          } else if (gb) {
            gb[l] += g[l];
          }
        }
        break;
      }
      case Op::Min: case Op::Max: {
        for (uint32_t l = 0; l < L; ++l) {
          if (g[l] == T(0) || (live && !live[l])) continue;
          int ties = 0;
          for (uint32_t i = 0; i < nd.nin; ++i) ties += val(in[i], l) == y[l];
          if (!ties) continue;
          T share = g[l] / T(ties);
          for (uint32_t i = 0; i < nd.nin; ++i)
            if (T* gi = acc(in[i]); gi && val(in[i], l) == y[l]) gi[l] += share;
        }
        break;
      }
      case Op::Dot: {
        for (uint32_t i = 0; 2 * i < nd.nin; ++i) {
          T* ga = acc(in[2 * i]);
          T* gb = acc(in[2 * i + 1]);
          if (!ga && !gb) continue;
          T ca, cb;
          size_t sa, sb;
          const T* pa = operand_lanes(in[2 * i], ca, sa);
          const T* pb = operand_lanes(in[2 * i + 1], cb, sb);
          if (ga) kern::acc_times(ga, g, pb, sb, live, L);
          if (gb) kern::acc_times(gb, g, pa, sa, live, L);
        }
        break;
      }
#undef NDVM_ACC
      case Op::Inv: case Op::Det: case Op::LogDet: case Op::Solve: {
        uint32_t n = nd.extra, kk = nd.extra2, nn = n * n;
        if (n == 2 && nd.op != Op::Solve) {
          // 2x2 closed forms across lanes: det' = cofactors, inv' = -Y^T G Y^T
          T c[4];
          size_t st[4];
          const T* P[4];
          T* D[4];
          for (int i = 0; i < 4; ++i) {
            P[i] = operand_lanes(in[i], c[i], st[i]);
            D[i] = acc(in[i]);
          }
          auto add = [&](int i, uint32_t l, T v) {
            if (D[i]) D[i][l] += v;
          };
          if (nd.op == Op::Inv) {
            const T* g0 = g;
            const T* g1 = adj_.data() + size_t(nd.out + 1) * L_;
            const T* g2 = adj_.data() + size_t(nd.out + 2) * L_;
            const T* g3 = adj_.data() + size_t(nd.out + 3) * L_;
            const T* y0 = pay(nd.out);
            const T* y1 = pay(nd.out + 1);
            const T* y2 = pay(nd.out + 2);
            const T* y3 = pay(nd.out + 3);
            // into four scratch rows first (a branch-free loop that vectorizes), then added
            if (scratch_.size() < 6 * size_t(L)) scratch_.resize(6 * size_t(L));
            T* __restrict r0 = scratch_.data() + 2 * size_t(L);
            T* __restrict r1 = r0 + L;
            T* __restrict r2 = r1 + L;
            T* __restrict r3 = r2 + L;
            for (uint32_t l = 0; l < L; ++l) {
              T m00 = y0[l] * g0[l] + y2[l] * g2[l], m01 = y0[l] * g1[l] + y2[l] * g3[l];
              T m10 = y1[l] * g0[l] + y3[l] * g2[l], m11 = y1[l] * g1[l] + y3[l] * g3[l];
              r0[l] = -(m00 * y0[l] + m01 * y1[l]);
              r1[l] = -(m00 * y2[l] + m01 * y3[l]);
              r2[l] = -(m10 * y0[l] + m11 * y1[l]);
              r3[l] = -(m10 * y2[l] + m11 * y3[l]);
            }
            const T* rows[4] = {r0, r1, r2, r3};
            for (int i = 0; i < 4; ++i)
              if (D[i]) kern::acc_plus(D[i], rows[i], T(1), live, L);
          } else {
            for (uint32_t l = 0; l < L; ++l) {
              if ((live && !live[l]) || g[l] == T(0)) continue;
              T a = P[0][l * st[0]], b = P[1][l * st[1]], cc = P[2][l * st[2]], d = P[3][l * st[3]];
              T w = nd.op == Op::Det ? g[l] : g[l] / (a * d - b * cc);
              add(0, l, w * d);
              add(1, l, -w * cc);
              add(2, l, -w * b);
              add(3, l, w * a);
            }
          }
          break;
        }
        A.resize(nn);
        Y.resize(std::max(nn, n * kk));
        G.resize(std::max(nn, n * kk));
        W.resize(3 * nn + 2 * n * kk);
        GA.resize(nn + n * kk);
        for (uint32_t l = 0; l < L_; ++l) {
          if (live && !live[l]) continue;
          for (uint32_t i = 0; i < nn; ++i) A[i] = val(in[i], l);
          std::fill(GA.begin(), GA.end(), T(0));
          if (nd.op == Op::Inv) {
            // dA = -Y^T G Y^T
            for (uint32_t i = 0; i < nn; ++i) {
              Y[i] = pay(nd.out + i)[l];
              G[i] = adj_[size_t(nd.out + i) * L_ + l];
            }
            T* YtG = W.data();
            for (uint32_t r = 0; r < n; ++r)
              for (uint32_t c = 0; c < n; ++c) {
                T s = T(0);
                for (uint32_t j = 0; j < n; ++j) s += Y[j * n + r] * G[j * n + c];
                YtG[r * n + c] = s;
              }
            for (uint32_t r = 0; r < n; ++r)
              for (uint32_t c = 0; c < n; ++c) {
                T s = T(0);
                for (uint32_t j = 0; j < n; ++j) s += YtG[r * n + j] * Y[c * n + j];
                GA[r * n + c] = -s;
              }
          } else if (nd.op == Op::Det || nd.op == Op::LogDet) {
            T gl = g[l];
            if (gl == T(0)) continue;
            if (nd.op == Op::Det && n <= 3) {
              // cofactors: exact even for a singular matrix
              if (n == 1) {
                GA[0] = gl;
              } else if (n == 2) {
                GA[0] = gl * A[3]; GA[1] = -gl * A[2]; GA[2] = -gl * A[1]; GA[3] = gl * A[0];
              } else {
                const T* a = A.data();
                T c[9] = {a[4] * a[8] - a[5] * a[7], -(a[3] * a[8] - a[5] * a[6]),
                          a[3] * a[7] - a[4] * a[6], -(a[1] * a[8] - a[2] * a[7]),
                          a[0] * a[8] - a[2] * a[6], -(a[0] * a[7] - a[1] * a[6]),
                          a[1] * a[5] - a[2] * a[4], -(a[0] * a[5] - a[2] * a[3]),
                          a[0] * a[4] - a[1] * a[3]};
                for (int i = 0; i < 9; ++i) GA[i] = gl * c[i];
              }
            } else {
              T* Ai = W.data() + 2 * nn;
              detail::inv_dense(A.data(), n, Ai, W.data());
              T scale = nd.op == Op::Det ? gl * y[l] : gl;
              for (uint32_t r = 0; r < n; ++r)
                for (uint32_t c = 0; c < n; ++c) GA[r * n + c] = scale * Ai[c * n + r];
            }
          } else {  // Solve: X = A^-1 B; dB = A^-T G; dA = -dB X^T
            T* Ai = W.data() + 2 * nn;
            detail::inv_dense(A.data(), n, Ai, W.data());
            for (uint32_t i = 0; i < n * kk; ++i) {
              Y[i] = pay(nd.out + i)[l];
              G[i] = adj_[size_t(nd.out + i) * L_ + l];
            }
            T* GB = GA.data() + nn;
            for (uint32_t r = 0; r < n; ++r)
              for (uint32_t c = 0; c < kk; ++c) {
                T s = T(0);
                for (uint32_t j = 0; j < n; ++j) s += Ai[j * n + r] * G[j * kk + c];
                GB[r * kk + c] = s;
              }
            for (uint32_t r = 0; r < n; ++r)
              for (uint32_t c = 0; c < n; ++c) {
                T s = T(0);
                for (uint32_t j = 0; j < kk; ++j) s += GB[r * kk + j] * Y[c * kk + j];
                GA[r * n + c] = -s;
              }
          }
          uint32_t nin = nd.op == Op::Solve ? nn + n * kk : nn;
          for (uint32_t i = 0; i < nin; ++i)
            if (T* gi = acc(in[i])) gi[l] += GA[i];
        }
        break;
      }
      default: break;
    }
  }
}

}  // namespace ndvm

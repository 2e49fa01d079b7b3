// The numeric operations on lanes (the forward half of the op table's rules): uniform inputs give
// uniform results (never broadcast); varying inputs give a new payload; an active input records one
// tape node. Elementwise ops take their lane kernels from ops.hpp; select, min/max and dot are
// here; linear algebra is in linalg.hpp, the reverse sweep in sweep.hpp.
#pragma once
#include <cmath>

#include "machine.hpp"
#include "ops.hpp"

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

// A binary op on two uniform numbers (out of line: the lane path's frame stays small).
template <class T>
__attribute__((noinline)) double uniform_binary(Op op, double a, double b) {
  return double(with_binary(op, [&](auto rule) { return decltype(rule)::f(T(a), T(b)); }));
}

}  // namespace detail


template <class T>
Value Machine<T>::unary(Op op, const Value& a) {
  if (compat_ref_) {
    if (op == Op::Sqrt) op = Op::SqrtRef;
    if (op == Op::Log) op = Op::LogRef;
  }
  if (!a.varying())
    return Value::number(double(with_unary(op, [&](auto rule) { return decltype(rule)::f(T(a.num)); })));
  uint32_t out = alloc_payloads(1);
  const T* x = pay(a.id);
  T* y = pay(out);
  with_unary(op, [&](auto rule) { decltype(rule)::lanes(x, y, L_); });
  bool act = a.active() && recording_;
  if (act) detail::Recorder<T>{*this}.record(op, &a, 1, out, 1);
  return Value::payload(out, act);
}

template <class T>
Value Machine<T>::binary(Op op, const Value& a, const Value& b) {
  if (!a.varying() && !b.varying()) return Value::number(detail::uniform_binary<T>(op, a.num, b.num));
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
  with_binary(op, [&](auto rule) { decltype(rule)::lanes(y, x, sa, z, sb, L_); });
  bool act = (a.active() || b.active()) && recording_;
  if (act) {
    Value ins[2] = {a, b};
    detail::Recorder<T>{*this}.record(op, ins, 2, out, 1);
  }
  return Value::payload(out, act);
}

template <class T>
NDVM_INLINE bool Machine<T>::fold_identity(Op op, const Value& a, const Value& b, Value& r) {
  // (inlined into binary(): this first test is all that most calls pay)
  if (const Value& u = a.varying() ? b : a; u.varying() || (u.num != 0.0 && u.num != 1.0))
    return false;
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
      case CMP_EQ: return u == v;
      case CMP_LT: return u < v;
      case CMP_GT: return u > v;
      case CMP_LE: return u <= v;
      default: return u >= v;  // CMP_GE
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

namespace detail {

// Two same-shaped lists merged element by element (iterative along the spine).
template <class T>
Value select_list(Machine<T>& m, int32_t mask, const Value& a, const Value& b) {
  std::vector<Value> cars;
  Value x = a, z = b;
  while (x.tag == Tag::Pair && z.tag == Tag::Pair && x.id != z.id) {
    Value ca = m.pairs_[x.id].car, cb = m.pairs_[z.id].car;
    cars.push_back(m.select(mask, ca, cb));
    x = m.pairs_[x.id].cdr;
    z = m.pairs_[z.id].cdr;
  }
  Value tail = (x.tag == Tag::Pair && z.tag == Tag::Pair) ? x : m.select(mask, x, z);
  for (size_t i = cars.size(); i-- > 0;) tail = m.cons(cars[i], tail);
  return tail;
}

}  // namespace detail

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
      return detail::select_list(*this, mask, a, b);
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
  for (uint32_t i = 0; i < n; ++i) {
    T ta, tb;
    size_t sa, sb;
    const T* x = lanes_of(a[i], ta, sa);
    const T* z = lanes_of(b[i], tb, sb);
    kern::fma_lanes(y, x, sa, z, sb, L_, i == 0);  // the first term stored: no zeroing pass
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

}  // namespace ndvm

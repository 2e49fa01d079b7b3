// The reverse sweep over a machine's tape: seed the result's adjoint, then walk the nodes back,
// each adding its operands' adjoints by the op family's rule (the elementwise rules come from the
// op table, ops.hpp; linear algebra from linalg.hpp). Invariants: every lane loop is unit-stride
// or stride 0, so it vectorizes; a zero upstream adjoint contributes exactly zero (never
// 0 * inf = nan); a node recorded under a lane mask adds only on that mask's lanes.
#pragma once
#include "linalg.hpp"

namespace ndvm {

namespace detail {

// One tape node as the sweep sees it: its output's values and adjoints, its lane mask, and each
// operand's lanes and adjoint (null when the operand is not active).
template <class T>
struct NodeView {
  Machine<T>& m;
  const TapeNode& nd;
  const Operand* in;
  const uint8_t* live;  // the node's lane mask, null for all lanes
  const T* g;           // adjoint of the first output
  const T* y;           // value of the first output
  uint32_t L;

  NodeView(Machine<T>& mm, const TapeNode& n)
      : m(mm), nd(n), in(mm.operands_.data() + n.in),
        live(n.mask >= 0 ? mm.mask_ptr(n.mask) : nullptr),
        g(mm.adj_.data() + size_t(n.out) * mm.L_), y(mm.pay(n.out)), L(mm.L_) {}

  NDVM_INLINE LanePtr<T> lanes(uint32_t i) const {
    const Operand& o = in[i];
    if (o.kind == OPND_CONST) return {&m.consts_[o.id], 0};
    return {m.pay(o.id), 1};
  }
  T val(uint32_t i, uint32_t l) const {
    return in[i].kind == OPND_CONST ? m.consts_[in[i].id] : m.pay(in[i].id)[l];
  }
  bool active(uint32_t i) const { return in[i].kind == OPND_ACTIVE; }
  // Operand i's adjoint, ready to add to (zeroed on its first use), or null when not active.
  T* adj(uint32_t i) const { return active(i) ? m.adjoint_for_add(in[i].id) : nullptr; }
  const T* out_adj(uint32_t k) const { return m.adj_.data() + size_t(nd.out + k) * L; }
  const T* out_val(uint32_t k) const { return m.pay(nd.out + k); }
  // adj(i)[l] += g[l] * p[l]: the multiply-add every elementwise rule ends in; an adjoint's first
  // contribution is stored instead (no zeroing pass). A few lanes run the kernel's loop inline
  // (the call and its ISA dispatch would cost more than the work).
  NDVM_INLINE void acc(uint32_t i, LanePtr<T> p) const {
    if (!active(i)) return;
    const uint32_t id = in[i].id;
    T* d = m.adj_.data() + size_t(id) * L;
    const bool set = !m.touched_[id];
    m.touched_[id] = 1;
    if (L == 1) {  // one lane (a scalar fit): the loops below without their loop overhead
      const bool on = (!live || live[0]) && g[0] != T(0);
      const T v = on ? g[0] * p.p[0] : T(0);
      if (set) d[0] = T(0) + v;
      else if (on || !live) d[0] += v;
    } else if (L >= kKernelLanes) {
      if (p.stride == 0 && (p.p[0] == T(1) || p.p[0] == T(-1)))  // + and -: no multiply
        kern::acc_plus(d, g, p.p[0], live, L, set);
      else
        kern::acc_times(d, g, p.p, p.stride, live, L, set);
    } else {
      kern::acc_times_t(d, g, p.p, p.stride, live, L, set);
    }
  }
  static constexpr uint32_t kKernelLanes = 8;
};

template <class T>
NDVM_INLINE void sweep_unary(const NodeView<T>& v) {
  if (!v.active(0)) return;
  const T* x = v.m.pay(v.in[0].id);  // a unary node's operand is always an active payload
  T* buf = v.m.scratch_.data();
  with_unary(v.nd.op, [&](auto rule) NDVM_INLINE_LAMBDA { v.acc(0, decltype(rule)::partial(x, v.y, buf, v.L)); });
}

template <class T>
NDVM_INLINE void sweep_binary(const NodeView<T>& v) {
  LanePtr<T> da, db;
  const LanePtr<T> a = v.lanes(0), b = v.lanes(1);
  with_binary(v.nd.op, [&](auto rule) NDVM_INLINE_LAMBDA {
    decltype(rule)::partials(a, b, v.y, v.m.scratch_.data(), v.L, da, db);
  });
  v.acc(0, da);
  v.acc(1, db);
}

// out = mask ? a : b: each lane's adjoint goes to the side it took
template <class T>
void sweep_select(const NodeView<T>& v) {
  const uint8_t* m = v.m.mask_ptr(int32_t(v.nd.extra));
  T* ga = v.adj(0);
  T* gb = v.adj(1);
  for (uint32_t l = 0; l < v.L; ++l) {
    if (v.live && !v.live[l]) continue;
    if (m[l]) {
      if (ga) ga[l] += v.g[l];
    } else if (gb) {
      gb[l] += v.g[l];
    }
  }
}

// min/max: the operands equal to the result share its adjoint evenly (ties split)
template <class T>
void sweep_minmax(const NodeView<T>& v) {
  for (uint32_t l = 0; l < v.L; ++l) {
    if (v.g[l] == T(0) || (v.live && !v.live[l])) continue;
    int ties = 0;
    for (uint32_t i = 0; i < v.nd.nin; ++i) ties += v.val(i, l) == v.y[l];
    if (!ties) continue;
    T share = v.g[l] / T(ties);
    for (uint32_t i = 0; i < v.nd.nin; ++i)
      if (T* gi = v.adj(i); gi && v.val(i, l) == v.y[l]) gi[l] += share;
  }
}

// out = sum_i in[2i] * in[2i+1]: each factor's partial is its partner
template <class T>
void sweep_dot(const NodeView<T>& v) {
  for (uint32_t i = 0; 2 * i < v.nd.nin; ++i) {
    v.acc(2 * i, v.lanes(2 * i + 1));
    v.acc(2 * i + 1, v.lanes(2 * i));
  }
}

}  // namespace detail

// The adjoint of payload id, zeroed if nothing has added to it yet in this sweep.
template <class T>
T* Machine<T>::adjoint_for_add(uint32_t id) {
  T* a = adj_.data() + size_t(id) * L_;
  if (!touched_[id]) {
    std::fill(a, a + L_, T(0));
    touched_[id] = 1;
  }
  return a;
}

// The reverse sweep: seeds the output's adjoint (ones when seed is null) and walks the tape back.
// Adjoints are not zeroed up front: touched_ marks those that have received a contribution, the
// first one is stored (NodeView::acc), and a node none of whose outputs was touched has a zero
// adjoint and is skipped (its contributions would all be exactly zero).
NDVM_COMPLETE_SWITCHES
template <class T>
void Machine<T>::reverse(const Value& outv, const T* seed) {
  size_t total = size_t(npay_) * L_;
  grow(adj_, total);
  if (adj_.size() < total) adj_.resize(total);
  touched_.assign(npay_, 0);
  if (!(outv.tag == Tag::Num && outv.active())) return;
  T* g0 = adj_.data() + size_t(outv.id) * L_;
  for (uint32_t l = 0; l < L_; ++l) g0[l] = seed ? seed[l] : T(1);
  touched_[outv.id] = 1;
  if (scratch_.size() < 6 * size_t(L_)) scratch_.resize(6 * size_t(L_));
  for (size_t k = nodes_.size(); k-- > 0;) {
    const TapeNode& nd = nodes_[k];
    bool any = false;
    for (uint32_t o = 0; o < nd.nout; ++o) any |= touched_[nd.out + o] != 0;
    if (!any) continue;
    for (uint32_t o = 0; o < nd.nout; ++o) adjoint_for_add(nd.out + o);  // untouched outputs: 0
    const detail::NodeView<T> v(*this, nd);
    switch (op_family(v.nd.op)) {
      case OpFamily::Unary: detail::sweep_unary(v); break;
      case OpFamily::Binary: detail::sweep_binary(v); break;
      case OpFamily::Select: detail::sweep_select(v); break;
      case OpFamily::MinMax: detail::sweep_minmax(v); break;
      case OpFamily::Dot: detail::sweep_dot(v); break;
      case OpFamily::Linalg: detail::sweep_linalg(v); break;
    }
  }
}
NDVM_END_COMPLETE_SWITCHES

}  // namespace ndvm

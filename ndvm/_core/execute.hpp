// The driver every client runs through: binds the caller's inputs to lanes, runs the client's walk
// of the program with partition-and-rerun on structural divergence, checks the result, and runs the
// reverse sweep into per-lane Jacobian rows. Lane l is start l / N, data point l % N.
#pragma once
#include "ast.hpp"
#include "prims.hpp"

namespace ndvm {

struct RunRequest {
  const Binding* bindings = nullptr;  // one per free name, in the program's order
  size_t nbind = 0;
  uint32_t S = 1, N = 1;
  bool grad = false;
  double* value_out = nullptr;  // [L]
  double** jac_out = nullptr;   // per binding: [L] for parameters, null otherwise
};

namespace detail {

template <class T>
void bind_inputs(Machine<T>& m, const RunRequest& rq) {
  m.free_vals_.resize(rq.nbind);
  m.param_pay_.assign(rq.nbind, -1);
  for (size_t i = 0; i < rq.nbind; ++i) {
    const Binding& b = rq.bindings[i];
    switch (b.kind) {
      case BindKind::Param: {
        uint32_t id = m.alloc_payloads(1);
        T* p = m.pay(id);
        if (m.N_ == 1) {  // lanes are starts
          for (uint32_t st = 0; st < m.S_; ++st) p[st] = T(b.values[b.rows ? st : 0]);
        } else {
          for (uint32_t st = 0; st < m.S_; ++st) {  // start st's value over its N lanes
            T v = T(b.values[b.rows ? st : 0]);
            std::fill(p + size_t(st) * m.N_, p + size_t(st + 1) * m.N_, v);
          }
        }
        m.free_vals_[i] = Value::payload(id, m.recording_);
        m.param_pay_[i] = id;
        break;
      }
      case BindKind::Data: {
        if (b.rows == 0) {
          m.free_vals_[i] = Value::number(double(T(b.values[0])));
          break;
        }
        uint32_t id = m.alloc_payloads(1);
        T* p = m.pay(id);
        for (uint32_t st = 0; st < m.S_; ++st)
          for (uint32_t n = 0; n < m.N_; ++n) p[size_t(st) * m.N_ + n] = T(b.values[n]);
        m.free_vals_[i] = Value::payload(id, false);
        break;
      }
      case BindKind::Const: {
        if (b.rows == 0 && b.cols == 0) {
          m.free_vals_[i] = Value::number(double(T(b.values[0])));
          break;
        }
        size_t cnt = size_t(b.rows) * size_t(b.cols ? b.cols : 1);
        uint64_t s = m.alloc_elems(cnt);
        for (size_t k = 0; k < cnt; ++k) m.elems_[s + k] = Value::number(double(T(b.values[k])));
        m.free_vals_[i] = b.cols ? Value::mat(s, uint16_t(b.rows), uint32_t(b.cols))
                                 : Value::vec(s, uint32_t(b.rows));
        break;
      }
    }
  }
}

template <class T>
void copy_adjoints(Machine<T>& m, double** jac_out, size_t nbind) {
  for (size_t i = 0; i < nbind && i < m.param_pay_.size(); ++i) {
    double* out = jac_out[i];
    if (!out) continue;
    int64_t pid = m.param_pay_[i];
    if (pid < 0 || !m.result_.active()) {
      for (uint32_t l = 0; l < m.L_; ++l) out[l] = 0.0;
      continue;
    }
    const T* a = m.adj_.data() + size_t(pid) * m.L_;
    for (uint32_t l = 0; l < m.L_; ++l) out[l] = double(a[l]);
  }
}

// Runs body() on the lanes of `mask` (-1: all). When a mixed branch returns structurally different
// values, rolls back and runs each side's lanes on their own, then merges the two numeric results.
template <class T, class Body>
Value run_partitioned(Machine<T>& m, Body& body, int32_t mask, const Node* result) {
  auto mk = m.mark();
  m.live_ = mask;
  try {
    Value v = body();
    if (v.tag != Tag::Num) {
      std::string what = v.tag == Tag::Vec   ? "a vector"
                         : v.tag == Tag::Mat ? "a matrix"
                                             : tag_name(v.tag);
      Error e(ErrorKind::Eval, "the program's result must be a number, got " + what,
              result->pos(), result->form());
      e.file_ = result->src->name_;
      throw e;
    }
    return v;
  } catch (Divergence& d) {
    m.restore(mk);
    int32_t m1 = m.new_mask(), m2 = m.new_mask();
    const uint8_t* live = mask >= 0 ? m.mask_ptr(mask) : nullptr;
    uint8_t* p1 = m.mask_ptr(m1);
    uint8_t* p2 = m.mask_ptr(m2);
    for (uint32_t l = 0; l < m.L_; ++l) {
      bool on = !live || live[l];
      p1[l] = on && d.part[l];
      p2[l] = on && !d.part[l];
    }
    Value a = run_partitioned(m, body, m1, result);
    Value b = run_partitioned(m, body, m2, result);
    m.live_ = mask;
    return m.select(m1, a, b);
  }
}

}  // namespace detail

// Evaluates one program: body() is the client's walk of x (it reads m.free_vals_ for free names).
template <class T, class Body>
void execute(Machine<T>& m, const Expanded& x, const RunRequest& rq, Body&& body) {
  m.reset(rq.S, rq.N, rq.grad, x.src_.get());
  detail::bind_inputs(m, rq);
  Value v = detail::run_partitioned(m, body, -1, x.result_);
  for (uint32_t l = 0; l < m.L_; ++l) rq.value_out[l] = double(m.lane(v, l));
  m.result_ = v;
  m.taped_ = rq.grad;
  // Without Jacobian outputs the tape is kept for a later seeded sweep (reverse_seeded).
  if (!rq.grad || !rq.jac_out) return;
  m.reverse(v, nullptr);
  detail::copy_adjoints(m, rq.jac_out, rq.nbind);
}

// A reverse sweep of the last run seeded with `seed` [L] (the caller's upstream gradient):
// jac_out[i] receives each lane's adjoint of parameter i. The last run must have recorded a tape.
template <class T>
void reverse_seeded(Machine<T>& m, const double* seed, double** jac_out, size_t nbind) {
  if (!m.taped_) throw Error(ErrorKind::Internal, "no recorded evaluation to differentiate");
  std::vector<T> s(seed, seed + m.L_);
  m.reverse(m.result_, s.data());
  detail::copy_adjoints(m, jac_out, nbind);
}

}  // namespace ndvm

// The driver every client runs through: binds the caller's inputs to lanes, runs the client's walk
// of the program with partition-and-rerun on structural divergence, checks the result, and runs the
// reverse sweep into per-lane Jacobian rows. Lane l is start l / N, data point l % N.
#pragma once
#include "ast.hpp"
#include <algorithm>

#include "prims.hpp"

namespace ndvm {

struct RunRequest {
  const Binding* bindings = nullptr;  // one per free name, in the program's order
  size_t nbind = 0;
  uint32_t S = 1, N = 1;
  bool grad = false;
  double* value_out = nullptr;  // [L]
  double** jac_out = nullptr;   // per binding: [L] for parameters, null otherwise
  // Mean-squared-error mode (with grad): the reverse sweep is seeded with d loss / d value, so
  // each start's loss and gradient come out directly, with no per-lane Jacobian.
  const double* target = nullptr;  // [N]
  double* loss_out = nullptr;      // [S]
  double** grad_out = nullptr;     // per binding: [S] for parameters, null otherwise
};

namespace detail {

template <class T>
void bind_inputs(Machine<T>& m, const RunRequest& rq) {
  m.free_vals_.resize(rq.nbind);
  m.param_pay_.assign(rq.nbind, -1);
  for (size_t i = 0; i < rq.nbind; ++i) {
    const Binding& b = rq.bindings[i];
    switch (b.kind) {
      case BindKind::Param: {  // one value per start: global lane g belongs to start g / N
        uint32_t id = m.alloc_payloads(1);
        T* p = m.pay(id);
        if (!b.rows) {
          std::fill(p, p + m.L_, T(b.values[0]));
        } else if (m.N_ == 1) {
          for (uint32_t l = 0; l < m.L_; ++l) p[l] = T(b.values[m.lane0_ + l]);
        } else {
          for (uint32_t l = 0; l < m.L_;) {  // runs of N lanes share a start
            uint32_t g = m.lane0_ + l, st = g / m.N_, run = std::min(m.N_ - g % m.N_, m.L_ - l);
            std::fill(p + l, p + l + run, T(b.values[st]));
            l += run;
          }
        }
        m.free_vals_[i] = Value::payload(id, m.recording_);
        m.param_pay_[i] = id;
        break;
      }
      case BindKind::Data: {  // one value per data point: global lane g is point g % N
        if (b.rows == 0) {
          m.free_vals_[i] = Value::number(double(T(b.values[0])));
          break;
        }
        uint32_t id = m.alloc_payloads(1);
        T* p = m.pay(id);
        for (uint32_t l = 0, n = m.lane0_ % m.N_; l < m.L_; ++l) {  // no division per lane
          p[l] = T(b.values[n]);
          if (++n == m.N_) n = 0;
        }
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
void copy_adjoints(Machine<T>& m, double** jac_out, size_t nbind, uint32_t offset = 0) {
  for (size_t i = 0; i < nbind && i < m.param_pay_.size(); ++i) {
    double* out = jac_out[i] ? jac_out[i] + offset : nullptr;
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

// One lane block of the MSE mode: adds each lane's squared residual / N to its start's loss and,
// with grad, sweeps the tape seeded with 2 (value - target) / N and adds each lane's adjoint of
// every parameter to its start's gradient.
template <class T>
void mse_block(Machine<T>& m, const RunRequest& rq, const Value& v, uint32_t l0) {
  const uint32_t L = m.L_, N = m.N_;
  if (m.scratch_.size() < 2 * size_t(L)) m.scratch_.resize(2 * size_t(L));
  std::vector<T> seed(L);  // (reverse() uses scratch_)
  const double inv_n = 1.0 / N;
  // lanes come in runs of one start's consecutive data points: one division per run, and
  // straight inner loops that the compiler vectorizes
  auto for_runs = [&](auto&& f) {
    for (uint32_t l = 0; l < L;) {
      uint32_t g = l0 + l, st = g / N, n = g % N, run = std::min(N - n, L - l);
      f(l, st, n, run);
      l += run;
    }
  };
  for_runs([&](uint32_t l, uint32_t st, uint32_t n, uint32_t run) {
    const double* v = rq.value_out + l0 + l;
    const double* y = rq.target + n;
    T* sd = seed.data() + l;
    double acc = 0.0;
    for (uint32_t k = 0; k < run; ++k) {
      double r = v[k] - y[k];
      acc += r * r;
      sd[k] = T(2.0 * r * inv_n);
    }
    rq.loss_out[st] += acc * inv_n;
  });
  if (!rq.grad || !rq.grad_out) return;
  m.reverse(v, seed.data());
  for (size_t i = 0; i < rq.nbind && i < m.param_pay_.size(); ++i) {
    double* out = rq.grad_out[i];
    int64_t pid = m.param_pay_[i];
    if (!out || pid < 0 || !v.active()) continue;
    const T* a = m.adj_.data() + size_t(pid) * L;
    for_runs([&](uint32_t l, uint32_t st, uint32_t, uint32_t run) {
      double acc = 0.0;
      for (uint32_t k = 0; k < run; ++k) acc += double(a[l + k]);
      out[st] += acc;
    });
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

// A quoted datum as a run-time value: numbers, booleans, symbols, and lists built from pairs.
template <class T>
Value quote_datum(Machine<T>& m, const Source* s, int32_t d) {
  check_native_stack(ErrorKind::Limit, "quoted data");
  const Datum& x = s->at(d);
  switch (x.kind) {
    case DatumKind::Num: return Value::number(x.num);
    case DatumKind::Bool: return Value::boolean(x.num != 0);
    case DatumKind::Sym: return Value::symbol(uint64_t(x.sym));
    case DatumKind::List: {
      Value tail = Value::nil();
      int cnt = x.count;
      if (x.dotted) tail = quote_datum(m, s, s->kid(x, --cnt));
      for (int i = cnt - 1; i >= 0; --i) tail = m.cons(quote_datum(m, s, s->kid(x, i)), tail);
      return tail;
    }
  }
  return Value::nil();
}

// Lanes per block when a large evaluation is run block by block: small enough that a block's
// payloads and adjoints stay in cache, large enough that per-node costs are amortized.
constexpr uint32_t kLaneBlock = 2048;

// Evaluates one program: body() is the client's walk of x (it reads m.free_vals_ for free names).
// Lanes are independent, so a large evaluation runs as consecutive blocks of lanes, each forward
// and reverse on its own; the results are bit for bit those of one run. A run whose tape is kept
// for a later seeded sweep (grad without Jacobian outputs) is never split.
template <class T, class Body>
void execute(Machine<T>& m, const Expanded& x, const RunRequest& rq, Body&& body) {
  uint32_t S = rq.S ? rq.S : 1, N = rq.N ? rq.N : 1;
  if (uint64_t(S) * N > UINT32_MAX)
    throw Error(ErrorKind::Limit, "too many lanes: " + std::to_string(S) + " starts x " +
                                      std::to_string(N) + " data points (at most 2^32 - 1)",
                x.result_->pos(), x.result_->form());
  uint32_t L = S * N;
  bool keep_tape = rq.grad && !rq.jac_out && !rq.target;
  if (rq.target) {
    for (uint32_t s = 0; s < S; ++s) rq.loss_out[s] = 0.0;
    for (size_t i = 0; rq.grad_out && i < rq.nbind; ++i)
      if (rq.grad_out[i]) std::fill(rq.grad_out[i], rq.grad_out[i] + S, 0.0);
  }
  uint32_t block = keep_tape ? L : std::min(L, kLaneBlock);
  try {
    for (uint32_t l0 = 0; l0 < L; l0 += block) {
      uint32_t count = std::min(block, L - l0);
      m.reset(S, N, rq.grad, x.src_.get(), l0, count);
      detail::bind_inputs(m, rq);
      Value v = detail::run_partitioned(m, body, -1, x.result_);
      for (uint32_t l = 0; l < count; ++l) rq.value_out[l0 + l] = double(m.lane(v, l));
      m.result_ = v;
      m.taped_ = rq.grad;
      if (rq.target) {
        detail::mse_block(m, rq, v, l0);
        continue;
      }
      // Without Jacobian outputs the tape is kept for a later seeded sweep (reverse_seeded).
      if (!rq.grad || !rq.jac_out) continue;
      m.reverse(v, nullptr);
      detail::copy_adjoints(m, rq.jac_out, rq.nbind, l0);
    }
  } catch (Error& e) {
    // a limit reached outside any form (binding inputs, splitting lanes, the reverse sweep) is
    // reported at the program's result expression, so that every error has a position
    if (e.pos_.line == 0) {
      e.pos_ = x.result_->pos();
      e.form_ = x.result_->form();
      e.file_ = x.result_->src->name_;
    }
    throw;
  }
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

// The driver every client runs through: binds the caller's inputs to lanes, runs the client's walk
// of the program with partition-and-rerun on structural divergence, checks the result, and runs the
// one reverse sweep the request asks for: seeded with ones, with the least-squares residual, or
// with the caller's seed; reduced per lane (Jacobian rows), per start (gradients), or not at all
// (the tape is kept for a later seeded sweep). Lane l is start l / N, data point l % N.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "ast.hpp"
#include "prims.hpp"
#include "sweep.hpp"

namespace ndvm {

struct RunRequest {
  const Binding* bindings = nullptr;  // one per free name, in the program's order
  size_t nbind = 0;
  uint32_t S = 1, N = 1;
  bool grad = false;            // record a tape
  // [L]; null when the values are not wanted (a probe: whether it raises is the answer), and then
  // with no target (the loss and the seed read them)
  double* value_out = nullptr;
  // The sweep's seed: ones by default; the caller's d/d value [L] in `seed`; or, with `target`
  // [N], the mean-squared-error residual 2 (value - target) / N, each start's loss going to
  // loss_out [S] (computed with or without grad).
  const double* seed = nullptr;
  const double* target = nullptr;
  double* loss_out = nullptr;
  // The sweep's reduction, per binding (null for all but the parameters wanted): jac_out [L] keeps
  // each lane's adjoint (Jacobian rows); grad_out [S] sums them per start. With neither, a grad
  // run keeps its tape for a later seeded sweep (reverse_seeded).
  double** jac_out = nullptr;
  double** grad_out = nullptr;
};

enum class Reduce { None, PerLane, PerStart };

inline Reduce reduction(const RunRequest& rq) {
  if (!rq.grad) return Reduce::None;
  return rq.jac_out ? Reduce::PerLane : rq.grad_out ? Reduce::PerStart : Reduce::None;
}

namespace detail {

// dst[l] = src[l] for l < n, converted: a memcpy for equal types, else a loop the compiler
// vectorizes (a 32-bit index offset inside the subscript would keep it scalar: it may wrap).
template <class D, class S>
NDVM_INLINE void copy_lanes(D* __restrict dst, const S* __restrict src, size_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memcpy(dst, src, n * sizeof(D));
  } else {
    for (size_t l = 0; l < n; ++l) dst[l] = D(src[l]);
  }
}

template <class T>
void bind_inputs(Machine<T>& m, const RunRequest& rq) {
  // (each entry of both is written below: a run of as many free names as the last resizes nothing)
  m.free_vals_.resize(rq.nbind);
  m.param_pay_.resize(rq.nbind);
  for (size_t i = 0; i < rq.nbind; ++i) {
    const Binding& b = rq.bindings[i];
    m.param_pay_[i] = -1;
    switch (b.kind) {
      case BindKind::Param: {  // one value per start: global lane g belongs to start g / N
        uint32_t id = m.alloc_payloads(1);
        T* p = m.pay(id);
        if (!b.rows) {
          std::fill(p, p + m.L_, T(b.values[0]));
        } else if (m.N_ == 1) {
          copy_lanes(p, b.values + m.lane0_, m.L_);
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
        for (uint32_t l = 0, n = m.lane0_ % m.N_; l < m.L_; n = 0) {  // runs of the N points
          uint32_t run = std::min(m.N_ - n, m.L_ - l);
          copy_lanes(p + l, b.values + n, run);
          l += run;
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

// Calls f(l, start, point, run) for each run of lanes [l, l + run) of one start's consecutive
// data points in the block starting at global lane l0: one division per run, and straight inner
// loops that the compiler vectorizes.
template <class F>
void for_start_runs(uint32_t l0, uint32_t L, uint32_t N, F&& f) {
  for (uint32_t l = 0; l < L;) {
    uint32_t g = l0 + l, st = g / N, n = g % N, run = std::min(N - n, L - l);
    f(l, st, n, run);
    l += run;
  }
}

// The adjoints of the parameters after a sweep, into the request's outputs: per lane (at global
// lane offset l0) or summed per start.
template <class T>
void reduce_adjoints(Machine<T>& m, Reduce how, double** out, size_t nbind, uint32_t l0) {
  const uint32_t L = m.L_, N = m.N_;
  const size_t n = std::min(nbind, m.param_pay_.size());
  const int64_t* pids = m.param_pay_.data();
  const bool swept = m.result_.active();  // else every adjoint is 0
  for (size_t i = 0; i < n; ++i) {
    double* o = out[i];
    if (!o) continue;
    const T* a = swept && pids[i] >= 0 ? m.adjoint(uint32_t(pids[i])) : nullptr;
    if (how == Reduce::PerLane) {
      double* dst = o + l0;
      if (!a) {
        std::fill(dst, dst + L, 0.0);
      } else {
        copy_lanes(dst, a, L);
      }
    } else if (a) {  // per start: the outputs start at zero
      for_start_runs(l0, L, N, [&](uint32_t l, uint32_t st, uint32_t, uint32_t run) {
        double acc = 0.0;
        for (uint32_t k = 0; k < run; ++k) acc += double(a[l + k]);
        o[st] += acc;
      });
    }
  }
}

// The seed of one lane block's sweep into `seed` (left empty for ones): the caller's, else with a
// target the mean squared error's. With a target, also adds each lane's squared residual / N to
// its start's loss (with a seed of the caller's too: the loss was left at 0).
template <class T>
void block_seed(Machine<T>& m, const RunRequest& rq, uint32_t l0, std::vector<T>& seed) {
  const uint32_t L = m.L_, N = m.N_;
  const bool own = !rq.seed && rq.target;
  if (rq.seed)
    seed.assign(rq.seed + l0, rq.seed + l0 + L);
  else if (own)
    seed.resize(L);  // (every entry is written below: a kept buffer of L lanes is not refilled)
  else
    seed.clear();
  if (!rq.target) return;
  const double inv_n = 1.0 / N;
  for_start_runs(l0, L, N, [&](uint32_t l, uint32_t st, uint32_t n, uint32_t run) {
    const double* v = rq.value_out + l0 + l;
    const double* y = rq.target + n;
    T* sd = seed.data() + l;
    double acc = 0.0;
    for (uint32_t k = 0; k < run; ++k) {
      double r = v[k] - y[k];
      acc += r * r;
      if (own) sd[k] = T(2.0 * r * inv_n);
    }
    rq.loss_out[st] += acc * inv_n;
  });
}

// The one reverse sweep of a lane block: seeded and reduced as the request says.
template <class T>
void sweep_block(Machine<T>& m, const RunRequest& rq, const Value& v, uint32_t l0) {
  std::vector<T>& seed = m.seed_;  // the machine's buffer: no allocation once it has grown
  block_seed(m, rq, l0, seed);
  Reduce how = reduction(rq);
  if (how == Reduce::None) return;
  m.reverse(v, seed.empty() ? nullptr : seed.data());
  reduce_adjoints(m, how, how == Reduce::PerLane ? rq.jac_out : rq.grad_out, rq.nbind, l0);
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

// Whether a lane index can count S x N lanes.
inline bool lanes_fit(uint64_t S, uint64_t N) { return S * N <= UINT32_MAX; }

// Whether `arrays` float64 outputs of S x N lanes fit both the lane range and `max_memory`: the
// rule check_outputs raises by (also asked before its guarded call, where outputs nearly always
// fit: a probe's few lanes).
inline bool outputs_fit(int64_t max_memory, uint64_t S, uint64_t N, uint64_t arrays) {
  return lanes_fit(S, N) && double(S) * double(N) * 8.0 * double(arrays) <= double(max_memory);
}

// The limit error of an evaluation over S x N lanes when it has more lanes than a lane index
// can count.
inline void check_lane_count(const Expanded& x, uint64_t S, uint64_t N) {
  if (!lanes_fit(S, N))
    throw Error(ErrorKind::Limit, "too many lanes: " + std::to_string(S) + " starts x " +
                                      std::to_string(N) + " data points (at most 2^32 - 1)",
                result_pos(x), x.result_ ? x.result_->form() : std::string());
}

// The limit error of a call whose outputs (`arrays` float64 arrays of S x N lanes) cannot fit in
// the lane range or the memory limit; checked before any output is allocated.
inline void check_outputs(const Expanded& x, int64_t max_memory, uint64_t S, uint64_t N,
                          uint64_t arrays) {
  if (outputs_fit(max_memory, S, N, arrays)) return;
  check_lane_count(x, S, N);
  double bytes = double(S) * double(N) * 8.0 * double(arrays);
  Error e(ErrorKind::Limit, "memory limit exceeded: the values and gradients of " +
                                std::to_string(S) + " x " + std::to_string(N) + " lanes need " +
                                memory_text(bytes) + ", more than " +
                                memory_text(double(max_memory)) +
                                " (raise it with Evaluator(max_memory=...))",
          result_pos(x));
  if (x.result_) e.file_ = x.result_->src->name_;
  throw e;
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
  check_lane_count(x, S, N);
  uint32_t L = S * N;
  Reduce how = reduction(rq);
  bool keep_tape = rq.grad && how == Reduce::None;
  if (rq.target)
    for (uint32_t s = 0; s < S; ++s) rq.loss_out[s] = 0.0;
  for (size_t i = 0; how == Reduce::PerStart && i < rq.nbind; ++i)
    if (rq.grad_out[i]) std::fill(rq.grad_out[i], rq.grad_out[i] + S, 0.0);
  uint32_t block = keep_tape ? L : std::min(L, kLaneBlock);
  try {
    for (uint32_t l0 = 0; l0 < L; l0 += block) {
      uint32_t count = std::min(block, L - l0);
      m.reset(S, N, rq.grad, &x.src_, l0, count);
      detail::bind_inputs(m, rq);
      Value v = detail::run_partitioned(m, body, -1, x.result_);
      if (rq.value_out)
        for (uint32_t l = 0; l < count; ++l) rq.value_out[l0 + l] = double(m.lane(v, l));
      m.result_ = v;
      m.taped_ = rq.grad;
      detail::sweep_block(m, rq, v, l0);
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

// A reverse sweep of the last run (which kept its tape) seeded with the caller's `seed` [L],
// reduced per lane into jac_out or, when jac_out is null, per start into grad_out.
template <class T>
void reverse_seeded(Machine<T>& m, const double* seed, double** jac_out, double** grad_out,
                    size_t nbind) {
  if (!m.taped_) throw Error(ErrorKind::Internal, "no recorded evaluation to differentiate");
  m.seed_.assign(seed, seed + m.L_);
  m.reverse(m.result_, m.seed_.data());
  Reduce how = jac_out ? Reduce::PerLane : Reduce::PerStart;
  double** out = jac_out ? jac_out : grad_out;
  for (size_t i = 0; how == Reduce::PerStart && i < nbind; ++i)
    if (out[i]) std::fill(out[i], out[i] + m.S_, 0.0);
  detail::reduce_adjoints(m, how, out, nbind, 0);
}

}  // namespace ndvm

// Machine<T>: the state one evaluation runs on — L lanes, the payload buffers (structure-of-arrays,
// payload p's lanes contiguous at lanes_[p*L]), lane masks, the pair and element heaps, a bump arena
// for client frames and closures, the tape, and the limits. Every buffer is kept across calls and
// only reset, so a warm evaluation of the same program allocates nothing.
#pragma once
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arena.hpp"
#include "error.hpp"
#include "reader.hpp"
#include "stack.hpp"
#include "tape.hpp"
#include "value.hpp"

namespace ndvm {

// Thrown when a mixed branch returns structurally different values on its two sides; the driver
// catches it, rolls the machine back and re-runs the program once per side (see execute.hpp).
struct Divergence {
  std::vector<uint8_t> part;  // lanes that took the `then` side
};

struct PairCell {
  Value car, cdr;
};

// How the caller binds one free name.
enum class BindKind : int { Param = 0, Data = 1, Const = 2 };

struct Binding {
  BindKind kind;
  const double* values;  // contiguous float64
  int64_t rows;          // Param: S (0 = scalar); Data: N (0 = scalar); Const: 0 scalar, n, or rows
  int64_t cols;          // Const 2-D: columns, else 0
};

struct Limits {
  int64_t max_steps = 10000000;
  int64_t max_depth = 10000;
  int64_t max_memory = int64_t(2) << 30;  // bytes
  // While a long evaluation may be interrupted (interrupt.hpp): nonzero once SIGINT or SIGTERM
  // arrived; the step check reads it when the step count & interrupt_mask is 0 (every 65,536
  // steps, or every step when each works on many lanes: interrupt::arm).
  const volatile std::sig_atomic_t* interrupt = nullptr;
  int64_t interrupt_mask = 0xFFFF;
};

template <class T>
class Machine {
 public:
  using Real = T;
  Limits limits_;
  bool compat_ref_ = false;  // the reference runtime's clamped sqrt/log

  // ---- per-run state -------------------------------------------------------------------------
  uint32_t L_ = 1, S_ = 1, N_ = 1;
  uint32_t lane0_ = 0;  // global index of this run's first lane (lane blocks, execute.hpp)
  bool recording_ = false;
  int32_t live_ = -1;  // current lane mask, -1 = all lanes
  int64_t steps_ = 0, depth_ = 0;
  const Source* src_ = nullptr;  // symbols of the program being run
  // native_stack_limit() of the thread running this run, read once a run (reset): each read is a
  // call through the library's thread-local storage, and enter() and the walks check it per call
  const char* stack_limit_ = nullptr;

  std::vector<T> lanes_;
  uint32_t npay_ = 0;
  std::vector<uint8_t> masks_;
  uint32_t nmask_ = 0;
  std::vector<PairCell> pairs_;
  std::vector<Value> elems_;
  Arena arena_;
  std::vector<TapeNode> nodes_;
  std::vector<Operand> operands_;
  std::vector<T> consts_;
  std::vector<T> adj_;
  std::vector<uint8_t> touched_;   // per payload: its adjoint holds this sweep's value (sweep.hpp)
  std::vector<T> scratch_;         // lane buffers of the reverse sweep (partials, 2x2 rows)
  std::vector<T> seed_;            // one lane block's reverse-sweep seed (kept across runs)
  std::vector<double> logdet_work_;  // logdet's elimination, in double (kept across runs)
  std::vector<T> linalg_work_;     // one lane's matrices in the dense linear-algebra sweep
  std::vector<Value> stack_;        // clients' value stack (arguments)
  // (these two are sized and every entry written by each run's binding, not cleared by reset:
  // runs of the same free names then neither shrink nor refill them)
  std::vector<Value> free_vals_;    // one per free name, in the program's order
  std::vector<int64_t> param_pay_;  // per free name: its payload id if it is an active param, -1
  std::vector<std::string> trace_;  // Scheme backtrace gathered while an error unwinds
  Value result_;                    // the last run's result, kept for a later seeded sweep
  bool taped_ = false;              // the last run recorded a tape that is still intact

  struct Mark {
    uint32_t npay, nmask;
    size_t pairs, elems, nodes, operands, consts, stack;
    Arena::Mark arena;
  };

  // ---- lifecycle -----------------------------------------------------------------------------
  // Prepares a run over lanes [lane0, lane0 + count) of an S x N evaluation (count 0: all).
  void reset(uint32_t S, uint32_t N, bool recording, const Source* src, uint32_t lane0 = 0,
             uint32_t count = 0) {
    S_ = S ? S : 1;
    N_ = N ? N : 1;
    lane0_ = lane0;
    L_ = count ? count : S_ * N_;
    recording_ = recording;
    live_ = -1;
    steps_ = depth_ = 0;
    src_ = src;
    stack_limit_ = native_stack_limit();
    npay_ = nmask_ = 0;
    pairs_.clear();
    elems_.clear();
    arena_.reset();
    nodes_.clear();
    operands_.clear();
    consts_.clear();
    stack_.clear();
    trace_.clear();
    taped_ = false;
  }

  Mark mark() const {
    return {npay_, nmask_, pairs_.size(), elems_.size(), nodes_.size(), operands_.size(),
            consts_.size(), stack_.size(), arena_.mark()};
  }
  void restore(const Mark& m) {
    npay_ = m.npay;
    nmask_ = m.nmask;
    pairs_.resize(m.pairs);
    elems_.resize(m.elems);
    nodes_.resize(m.nodes);
    operands_.resize(m.operands);
    consts_.resize(m.consts);
    stack_.resize(m.stack);
    arena_.restore(m.arena);
  }

  // ---- limits --------------------------------------------------------------------------------
  void tick() {
    if (++steps_ > limits_.max_steps)
      throw Error(ErrorKind::Limit, "step limit exceeded: more than " +
                                        std::to_string(limits_.max_steps) +
                                        " evaluation steps (raise it with Evaluator(max_steps=...))");
    if ((steps_ & limits_.interrupt_mask) == 0 && limits_.interrupt && *limits_.interrupt)
      interrupted();
  }
  [[noreturn]] static void interrupted() {
    throw Error(ErrorKind::Limit, "the evaluation was interrupted by a signal");
  }
  // Called on every nested call (and branch arm): one level of the depth limit.
  void enter() {
    ++depth_;
    if (depth_ > limits_.max_depth) {
      --depth_;
      throw Error(ErrorKind::Limit, "recursion depth limit exceeded: more than " +
                                        std::to_string(limits_.max_depth) +
                                        " nested calls (raise it with Evaluator(max_depth=...))");
    }
    if (native_stack_exhausted(stack_limit_)) {
      --depth_;
      enter_native_exhausted();
    }
  }
  [[noreturn]] void enter_native_exhausted() const {
    throw Error(ErrorKind::Limit,
                "recursion too deep for the native stack at depth " + std::to_string(depth_) +
                    " (run in a thread with a larger stack, or recurse less deeply)");
  }
  void leave() { --depth_; }
  struct DepthGuard {
    Machine& m;
    explicit DepthGuard(Machine& mm) : m(mm) { m.enter(); }
    ~DepthGuard() { m.leave(); }
  };

  size_t bytes_in_use() const {
    return lanes_.capacity() * sizeof(T) + adj_.capacity() * sizeof(T) + masks_.capacity() +
           pairs_.capacity() * sizeof(PairCell) + elems_.capacity() * sizeof(Value) +
           arena_.bytes() + nodes_.capacity() * sizeof(TapeNode) +
           operands_.capacity() * sizeof(Operand) + consts_.capacity() * sizeof(T);
  }
  void check_memory(size_t extra) const {
    if (bytes_in_use() + extra > size_t(limits_.max_memory))
      throw Error(ErrorKind::Limit,
                  "memory limit exceeded: the evaluation needs more than " +
                      memory_text(double(limits_.max_memory)) +
                      " of lane and tape memory (raise it with Evaluator(max_memory=...))");
  }
  template <class V>
  void grow(V& v, size_t need) {
    if (need > v.capacity()) {
      size_t cap = std::max(need, v.capacity() * 2);
      check_memory((cap - v.capacity()) * sizeof(typename V::value_type));
      v.reserve(cap);
    }
  }

  // ---- payloads ------------------------------------------------------------------------------
  uint32_t alloc_payloads(uint32_t k) {
    size_t need = size_t(npay_ + k) * L_;
    if (need > lanes_.size()) {
      grow(lanes_, need);
      lanes_.resize(lanes_.capacity());
    }
    uint32_t id = npay_;
    npay_ += k;
    return id;
  }
  T* pay(uint64_t id) { return lanes_.data() + size_t(id) * L_; }
  const T* pay(uint64_t id) const { return lanes_.data() + size_t(id) * L_; }

  // Pointer and stride (0 for a uniform value) to read a Num's lanes.
  const T* lanes_of(const Value& v, T& tmp, size_t& stride) const {
    if (v.varying()) {
      stride = 1;
      return pay(v.id);
    }
    tmp = T(v.num);
    stride = 0;
    return &tmp;
  }
  T lane(const Value& v, uint32_t l) const { return v.varying() ? pay(v.id)[l] : T(v.num); }

  // ---- masks ---------------------------------------------------------------------------------
  int32_t new_mask() {
    size_t need = size_t(nmask_ + 1) * L_;
    if (need > masks_.size()) {
      grow(masks_, need);
      masks_.resize(masks_.capacity());
    }
    return int32_t(nmask_++);
  }
  uint8_t* mask_ptr(int32_t id) { return masks_.data() + size_t(id) * L_; }
  const uint8_t* mask_ptr(int32_t id) const { return masks_.data() + size_t(id) * L_; }
  bool is_live(uint32_t l) const { return live_ < 0 || mask_ptr(live_)[l]; }

  enum class Truth { True, False, Mixed };
  // Whether a test value is true on all, none or some of the live lanes.
  Truth truth(const Value& v) const {
    if (v.tag != Tag::Bool) return Truth::True;  // only #f is false
    if (!v.varying()) return v.num != 0.0 ? Truth::True : Truth::False;
    const uint8_t* t = mask_ptr(int32_t(v.id));
    const uint8_t* m = live_ < 0 ? nullptr : mask_ptr(live_);
    bool any_t = false, any_f = false;
    for (uint32_t l = 0; l < L_; ++l) {
      if (m && !m[l]) continue;
      if (t[l]) any_t = true; else any_f = true;
      if (any_t && any_f) return Truth::Mixed;
    }
    return any_f ? Truth::False : Truth::True;  // no live lane at all cannot happen
  }
  // live & test (side = true) or live & !test (side = false), for a varying boolean test.
  int32_t branch_mask(const Value& test, bool side) {
    int32_t id = new_mask();
    uint8_t* out = mask_ptr(id);
    const uint8_t* t = mask_ptr(int32_t(test.id));
    const uint8_t* m = live_ < 0 ? nullptr : mask_ptr(live_);
    for (uint32_t l = 0; l < L_; ++l) {
      uint8_t b = side ? t[l] : uint8_t(!t[l]);
      out[l] = m ? uint8_t(b & m[l]) : b;
    }
    return id;
  }

  // ---- heaps ---------------------------------------------------------------------------------
  Value cons(Value a, Value d) {
    grow(pairs_, pairs_.size() + 1);
    pairs_.push_back({a, d});
    return Value::pair(pairs_.size() - 1);
  }
  PairCell& cell(const Value& p) { return pairs_[p.id]; }
  // Reserves n element slots and returns the index of the first.
  uint64_t alloc_elems(size_t n) {
    grow(elems_, elems_.size() + n);
    uint64_t start = elems_.size();
    elems_.resize(start + n);
    return start;
  }
  void* alloc_bytes(size_t n) {
    void* p = arena_.alloc(n);
    if (arena_.bytes() > size_t(limits_.max_memory)) check_memory(0);
    return p;
  }
  Closure* new_closure(const void* code, void* env) {
    auto* c = static_cast<Closure*>(alloc_bytes(sizeof(Closure)));
    c->code = code;
    c->env = env;
    return c;
  }

  // ---- numeric operations (numeric.hpp, linalg.hpp; the sweep in sweep.hpp) -------------------
  Value unary(Op op, const Value& a);
  Value binary(Op op, const Value& a, const Value& b);
  bool fold_identity(Op op, const Value& a, const Value& b, Value& r);
  Value compare(int cmp, const Value& a, const Value& b);  // cmp: 0 =, 1 <, 2 >, 3 <=, 4 >=
  Value select(int32_t mask, const Value& a, const Value& b);
  Value minmax(bool is_max, const Value* xs, int n);
  Value dot(const Value* a, const Value* b, uint32_t n);
  Value bool_and(const Value& a, const Value& b);
  Value bool_not(const Value& a);
  void linalg(Op op, const Value* a, uint32_t n, const Value* b, uint32_t k, Value* out);
  void reverse(const Value& out, const T* seed);
  T* adjoint_for_add(uint32_t id);
  // After a sweep: payload id's adjoint, or null when it is zero (nothing reached it).
  const T* adjoint(uint32_t id) const {
    return id < touched_.size() && touched_[id] ? adj_.data() + size_t(id) * L_ : nullptr;
  }

};

}  // namespace ndvm

// The bytecode VM: one switch loop over a Chunk, on the core's Machine (lanes, masks, heaps, tape)
// and primitive table. Calls push a small record, tail calls and RECUR reuse the activation, so
// loops and tail recursion run in constant native and VM stack; non-tail calls are bounded by the
// machine's depth limit. A branch whose test differs across lanes runs each arm in a nested loop
// under its lane mask (the only native recursion) and merges them with the machine's select,
// exactly as dmci does; steps are counted per evaluated node as in dmci.
#pragma once
#include "chunk.hpp"
#include "walk.hpp"

namespace ndvm::bytecode {

// A runtime frame: a lambda's or a loop's slots. Let and letrec slots are flattened into it.
struct Frame {
  Frame* parent;
  Frame* saved;  // loop frames: the reusable frame to restore when the loop exits
  Value slots[1];
};

// A suspended activation: where to continue when the callee returns. Nested mixed-branch runs
// push one too (ret == nullptr), so a backtrace sees every activation.
struct CallRecord {
  const Instr* ret;
  Frame* env;
  const Node* site;   // the call that entered this activation (null: top level or branch arm)
  Frame* reusable;
};

// Per-thread VM buffers, kept across runs (a warm run allocates nothing).
struct VmBuffers {
  std::vector<Value> stack;
  std::vector<CallRecord> frames;
};
inline VmBuffers& vm_buffers() {
  static thread_local VmBuffers b;
  return b;
}

template <class T>
class Vm {
 public:
  Vm(Machine<T>& m, const Chunk& c)
      : m_(m), c_(c), code_(c.code.data()), prims_(m), buf_(vm_buffers()) {}

  // One whole run of the program from scratch (the driver may call it again per lane partition).
  Value run() {
    buf_.frames.clear();
    site_ = nullptr;
    reusable_ = nullptr;
    base_ = buf_.stack.data();
    end_ = base_ + buf_.stack.size();
    sp_ = base_;
    int64_t depth0 = m_.depth_;
    try {
      typename Machine<T>::DepthGuard guard(m_);  // the top level counts as one level, as in dmci
      const Proto& top = c_.protos[0];
      Frame* env = new_frame(top.frame_size, nullptr);
      ensure(sp_, top.max_stack);
      return exec(code_ + top.entry, env, nullptr);
    } catch (Error& e) {
      m_.depth_ = depth0;
      backtrace(e);
      throw;
    } catch (...) {
      m_.depth_ = depth0;
      throw;
    }
  }

 private:
  Machine<T>& m_;
  const Chunk& c_;
  const Instr* code_;
  Prims<T> prims_;
  VmBuffers& buf_;
  Value* base_ = nullptr;  // the value stack: [base_, end_), sp_ synced around nested runs
  Value* end_ = nullptr;
  Value* sp_ = nullptr;
  const Node* site_ = nullptr;
  Frame* reusable_ = nullptr;  // the loop frame RECUR may overwrite in place

  Frame* new_frame(uint32_t n, Frame* parent) {
    auto* f = static_cast<Frame*>(m_.alloc_bytes(sizeof(Frame) + sizeof(Value) * (n ? n - 1 : 0)));
    f->parent = parent;
    f->saved = nullptr;
    return f;
  }

  // Makes room for `need` more values above sp (rebasing sp if the stack moves).
  void ensure(Value*& sp, uint32_t need) {
    if (sp + need <= end_) return;
    size_t used = size_t(sp - base_);
    size_t want = std::max<size_t>({used + need + 64, buf_.stack.size() * 2, 256});
    m_.check_memory((want - buf_.stack.size()) * sizeof(Value));
    buf_.stack.resize(want);
    base_ = buf_.stack.data();
    end_ = base_ + buf_.stack.size();
    sp = base_ + used;
  }

  const Node* node_at(const Instr* pc) const { return c_.lines[size_t(pc - code_)]; }

  [[noreturn]] static void fail(const Node* n, ErrorKind k, const std::string& msg) {
    fail_at(n, k, msg);
  }

  // The Scheme backtrace, innermost first, in dmci's format: every activation entered by a call.
  void backtrace(Error& e) const {
    if (site_) add_call_frame(e, site_);
    for (size_t i = buf_.frames.size(); i-- > 0;)
      if (buf_.frames[i].site) add_call_frame(e, buf_.frames[i].site);
  }

  Value prim(int id, const Value* args, int n, const Node* at, bool check) {
    try {
      if (check) check_arity(id, n);
      return prims_.call(id, args, n);
    } catch (Error& e) {
      locate(e, at);
      throw;
    }
  }

  // Runs a branch arm from `pc` in the current activation until its value reaches `stop` (or
  // it returns, for an arm in tail position).
  Value arm(const Instr* pc, Frame* env, const Instr* stop, Value*& sp) {
    typename Machine<T>::DepthGuard guard(m_);
    buf_.frames.push_back({nullptr, env, site_, reusable_});
    site_ = nullptr;
    reusable_ = nullptr;
    sp_ = sp;
    Value v = exec(pc, env, stop);
    const CallRecord& r = buf_.frames.back();
    site_ = r.site;
    reusable_ = r.reusable;
    buf_.frames.pop_back();
    sp = sp_;
    return v;
  }

  // Both sides of a branch whose test differs across live lanes (walk.hpp); a side given as a
  // value is not evaluated.
  Value mixed(const Value& test, const Instr* then_pc, const Instr* else_pc, const Value* then_v,
              const Value* else_v, const Instr* stop, Frame* env, Value*& sp) {
    return mixed_branch(
        m_, test, [&] { return then_pc ? arm(then_pc, env, stop, sp) : *then_v; },
        [&] { return else_pc ? arm(else_pc, env, stop, sp) : *else_v; });
  }

  // Counts n steps for the instruction at pc; past the limit, the error names the node (of those
  // the instruction starts) whose step exceeded it, as dmci's would.
  void ticks(const Instr* pc, uint32_t n) {
    size_t at;
    if (m_.steps_ + n <= m_.limits_.max_steps) {
      m_.steps_ += n;
      // (an interruptible evaluation: the signal's flag read at every instruction, as cheap
      // as dmci's check every 65,536 steps beside the instruction's own work)
      if (!m_.limits_.interrupt || !*m_.limits_.interrupt || n == 0) return;
      at = c_.tick_at[size_t(pc - code_)];
      try {
        Machine<T>::interrupted();
      } catch (Error& e) {
        locate(e, c_.tick_nodes[at]);
        throw;
      }
    }
    at = c_.tick_at[size_t(pc - code_)];
    for (uint32_t k = 0; k < n; ++k) {
      try {
        m_.tick();
      } catch (Error& e) {
        locate(e, c_.tick_nodes[at + k]);
        throw;
      }
    }
  }

  Value exec(const Instr* pc, Frame* env, const Instr* stop) {
    const size_t base = buf_.frames.size();
    Value* sp = sp_;
    const Instr* fault = pc;  // the instruction being executed
    try {
        for (;;) {
        if (pc == stop && buf_.frames.size() == base) {
          sp_ = sp - 1;
          return sp[-1];
        }
        const Instr& ins = *pc++;
        if (ins.ticks) ticks(pc - 1, ins.ticks);
        fault = pc - 1;
        switch (Opcode(ins.op)) {
          case OP_CONST: *sp++ = c_.constants[ins.a]; break;
          case OP_QUOTE: {
            const Node* n = node_at(pc - 1);
            *sp++ = quote_datum(m_, n->src, n->datum);
            break;
          }
          case OP_LOCAL: {
            Frame* f = env;
            for (uint32_t d = ins.a; d; --d) f = f->parent;
            *sp++ = f->slots[ins.b];
            break;
          }
          case OP_LOCAL_CHECKED: {
            Frame* f = env;
            for (uint32_t d = ins.a; d; --d) f = f->parent;
            const Value& v = f->slots[ins.b];
            if (is_unassigned(v)) fail_unassigned(node_at(pc - 1));
            *sp++ = v;
            break;
          }
          case OP_FREE: *sp++ = m_.free_vals_[ins.a]; break;
          case OP_CLOSURE:
            *sp++ = Value::closure(m_.new_closure(&c_.protos[ins.a], env));
            break;
          case OP_POP: --sp; break;
          case OP_BIND:
            sp -= ins.a;
            for (uint32_t i = 0; i < ins.a; ++i) env->slots[ins.b + i] = sp[i];
            break;
          case OP_SET: env->slots[ins.b] = *--sp; break;
          case OP_UNASSIGNED:
            for (uint32_t i = 0; i < ins.a; ++i) env->slots[ins.b + i] = unassigned();
            break;
          case OP_IF: {
            Value t = *--sp;
            switch (m_.truth(t)) {
              case Machine<T>::Truth::True: break;
              case Machine<T>::Truth::False: pc = code_ + ins.b; break;
              case Machine<T>::Truth::Mixed: {
                const Instr* k = code_ + ins.c;
                Value v = mixed(t, pc, code_ + ins.b, nullptr, nullptr, k, env, sp);
                *sp++ = v;
                pc = k;
                break;
              }
            }
            break;
          }
          case OP_AND:
          case OP_OR: {
            Value a = sp[-1];
            auto tr = m_.truth(a);
            bool is_and = ins.op == OP_AND;
            if (tr == Machine<T>::Truth::Mixed) {
              --sp;
              const Instr* k = code_ + ins.c;
              Value v = is_and ? mixed(a, pc, nullptr, nullptr, &a, k, env, sp)
                               : mixed(a, nullptr, pc, &a, nullptr, k, env, sp);
              *sp++ = v;
              pc = k;
            } else if ((tr == Machine<T>::Truth::True) != is_and) {
              pc = code_ + ins.c;  // the first value decides: it is the result
            } else {
              --sp;  // evaluate the second operand
            }
            break;
          }
          case OP_JUMP: pc = code_ + ins.b; break;
          case OP_PRIM: {
            Value* args = sp - ins.a;
            Value r = prim(int(ins.b), args, int(ins.a), node_at(pc - 1), false);
            sp = args;
            *sp++ = r;
            break;
          }
          case OP_CALL:
          case OP_TAIL_CALL: {
            Value* args = sp - ins.a;
            Value f = args[-1];
            uint32_t argc = ins.a;
            const Node* at = node_at(pc - 1);
            if (f.tag == Tag::Prim) {
              Value r = prim(int(f.cols), args, int(argc), at, true);
              sp = args - 1;
              *sp++ = r;
              if (ins.op == OP_TAIL_CALL) goto do_return;
              break;
            }
            if (f.tag != Tag::Closure) fail_not_procedure(at, f);
            auto* cl = static_cast<const Closure*>(f.ptr);
            const Proto* p = static_cast<const Proto*>(cl->code);
            check_closure_arity(at, p->name, p->nparams, p->rest, argc);
            Frame* fr = new_frame(p->frame_size, static_cast<Frame*>(cl->env));
            for (uint32_t i = 0; i < p->nparams; ++i) fr->slots[i] = args[i];
            if (p->rest) {
              Value rest = Value::nil();
              for (uint32_t i = argc; i > p->nparams; --i) rest = m_.cons(args[i - 1], rest);
              fr->slots[p->nparams] = rest;
            }
            sp = args - 1;
            if (ins.op == OP_CALL) {
              try {
                m_.enter();
              } catch (Error& e) {
                locate(e, at);  // the call that went one level too deep, as in dmci
                throw;
              }
              buf_.frames.push_back({pc, env, site_, reusable_});
            }
            env = fr;
            pc = code_ + p->entry;
            site_ = at;
            reusable_ = nullptr;
            ensure(sp, p->max_stack);
            break;
          }
          case OP_RETURN:
          do_return: {
            Value v = *--sp;
            if (buf_.frames.size() == base) {
              sp_ = sp;
              return v;
            }
            const CallRecord& r = buf_.frames.back();
            pc = r.ret;
            env = r.env;
            site_ = r.site;
            reusable_ = r.reusable;
            buf_.frames.pop_back();
            m_.leave();
            *sp++ = v;
            break;
          }
          case OP_LOOP: {
            const LoopInfo& l = c_.loops[ins.a];
            Frame* f = new_frame(l.frame_size, env);
            f->saved = reusable_;
            sp -= l.nvars;
            for (uint32_t i = 0; i < l.nvars; ++i) f->slots[i] = sp[i];
            reusable_ = l.captures ? nullptr : f;
            env = f;
            break;
          }
          case OP_RECUR: {
            const LoopInfo& l = c_.loops[ins.a];
            Frame* f = env;
            if (f != reusable_) {
              Frame* g = new_frame(l.frame_size, f->parent);
              g->saved = f->saved;
              f = g;
              reusable_ = l.captures ? nullptr : f;
            }
            sp -= l.nvars;
            for (uint32_t i = 0; i < l.nvars; ++i) f->slots[i] = sp[i];
            env = f;
            pc = code_ + l.body;
            break;
          }
          case OP_LOOP_EXIT:
            reusable_ = env->saved;
            env = env->parent;
            break;
          case OP_TICK: ticks(pc - 1, ins.a); break;
          default: NDVM_ASSERT(false);
        }
      }
    } catch (Error& e) {
      // anything position-less (limits, memory) is reported at the failing instruction's node
      locate(e, node_at(fault));
      throw;
    }
  }
};

// The client's entry point: one whole evaluation of the compiled program over the request's lanes.
template <class T>
void run(Machine<T>& m, const Expanded& x, const Chunk& c, const RunRequest& rq) {
  Vm<T> vm(m, c);
  execute(m, x, rq, [&]() { return vm.run(); });
}

}  // namespace ndvm::bytecode

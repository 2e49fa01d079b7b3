// dmci: the tree-walking client. It walks the expanded program (ndvm/_core/ast.hpp) directly:
// every eval() call is a loop whose tail positions (if arms, bodies, closure calls, recur) replace
// the node and the frame instead of recursing, so tail calls and loops run in constant native
// stack. Frames live in the machine's arena; a loop that creates no closure reuses its frame.
#pragma once
#include "walk.hpp"

namespace ndvm::dmci {

struct Frame {
  Frame* parent;
  uint32_t n;
  Value slots[1];
};

template <class T>
class Eval {
 public:
  Eval(Machine<T>& m, const Expanded& x) : m_(m), x_(x), prims_(m) {}

  Value run() { return eval(x_.root_, nullptr, true); }

 private:
  Machine<T>& m_;
  const Expanded& x_;
  Prims<T> prims_;

  Frame* new_frame(uint32_t n, Frame* parent) {
    auto* f = static_cast<Frame*>(m_.alloc_bytes(sizeof(Frame) + sizeof(Value) * (n ? n - 1 : 0)));
    f->parent = parent;
    f->n = n;
    return f;
  }

  [[noreturn]] static void fail(const Node* n, ErrorKind k, const std::string& msg) {
    fail_at(n, k, msg);
  }

  Value lookup(const Node* n, Frame* env) {
    Frame* f = env;
    for (uint32_t d = n->depth; d; --d) f = f->parent;
    const Value& v = f->slots[n->slot];
    if (is_unassigned(v)) fail_unassigned(n);
    return v;
  }

  // Non-tail evaluation of a subexpression; constants and variables skip the call.
  Value sub(const Node* n, Frame* env) {
    switch (n->kind) {
      case NodeKind::Const: return n->constant;
      case NodeKind::Local: return lookup(n, env);
      case NodeKind::Free: return m_.free_vals_[n->slot];
      default: return eval(n, env);
    }
  }

  Value quote(const Node* n) { return quote_datum(m_, n->src, n->datum); }

  // Both arms of a branch whose test differs across live lanes (walk.hpp); an arm given as a
  // value is not evaluated.
  Value mixed(const Value& test, const Node* then_n, const Node* else_n, const Value* then_v,
              const Value* else_v, Frame* env) {
    return mixed_branch(
        m_, test, [&] { return then_n ? eval(then_n, env, true) : *then_v; },
        [&] { return else_n ? eval(else_n, env, true) : (else_v ? *else_v : Value::unspec()); });
  }

  // One level of the depth limit, held by an invocation for as long as it runs.
  struct Level {
    Machine<T>& m;
    bool on = false;
    void enter() {
      m.enter();
      on = true;
    }
    ~Level() {
      if (on) m.leave();
    }
  };

  // `level`: this invocation is the top level or a branch arm, which count one depth level each;
  // any other invocation counts one when it enters a closure body (a non-tail call), so the
  // depth limit counts nested calls and branch arms, exactly as the bytecode VM does.
  Value eval(const Node* n, Frame* env, bool level = false) {
    if (native_stack_exhausted(m_.stack_limit_)) m_.enter_native_exhausted();
    Level depth{m_};
    if (level) depth.enter();
    Frame* reusable = nullptr;     // a loop frame this invocation owns and may overwrite
    const Node* running = nullptr; // the closure whose body this invocation is in (backtraces)
    try {
      for (;;) {
        m_.tick();
        switch (n->kind) {
          case NodeKind::Const: return n->constant;
          case NodeKind::Quote: return quote(n);
          case NodeKind::Local: return lookup(n, env);
          case NodeKind::Free: return m_.free_vals_[n->slot];
          case NodeKind::PrimRef: return Value::prim(n->slot);
          case NodeKind::Lambda: return Value::closure(m_.new_closure(n, env));
          case NodeKind::If: {
            Value t = sub(n->kids[0], env);
            switch (m_.truth(t)) {
              case Machine<T>::Truth::True: n = n->kids[1]; continue;
              case Machine<T>::Truth::False:
                if (n->kids.size() < 3) return Value::unspec();
                n = n->kids[2];
                continue;
              case Machine<T>::Truth::Mixed:
                return mixed(t, n->kids[1], n->kids.size() > 2 ? n->kids[2] : nullptr, nullptr,
                             nullptr, env);
            }
            break;
          }
          case NodeKind::And:
          case NodeKind::Or: {
            Value a = sub(n->kids[0], env);
            auto tr = m_.truth(a);
            bool is_and = n->kind == NodeKind::And;
            if (tr == Machine<T>::Truth::Mixed) {
              if (is_and) return mixed(a, n->kids[1], nullptr, nullptr, &a, env);
              return mixed(a, nullptr, n->kids[1], &a, nullptr, env);
            }
            if ((tr == Machine<T>::Truth::True) != is_and) return a;
            n = n->kids[1];
            continue;
          }
          case NodeKind::Begin: {
            size_t k = n->kids.size();
            for (size_t i = 0; i + 1 < k; ++i) sub(n->kids[i], env);
            n = n->kids[k - 1];
            continue;
          }
          case NodeKind::Let:
          case NodeKind::Loop: {
            uint32_t k = n->frame_size;
            Frame* f = new_frame(k, env);
            for (uint32_t i = 0; i < k; ++i) f->slots[i] = sub(n->kids[i], env);
            if (n->kind == NodeKind::Loop) reusable = n->captures ? nullptr : f;
            env = f;
            n = n->kids[k];
            continue;
          }
          case NodeKind::Letrec: {
            Frame* f = new_frame(n->frame_size, env);
            for (uint32_t i = 0; i < n->frame_size; ++i) f->slots[i] = unassigned();
            size_t inits = n->slots.size();
            for (size_t i = 0; i < inits; ++i) f->slots[n->slots[i]] = sub(n->kids[i], f);
            env = f;
            n = n->kids[inits];
            continue;
          }
          case NodeKind::Recur: {
            const Node* loop = n->loop;
            Frame* lf = env;
            for (uint32_t d = n->depth; d; --d) lf = lf->parent;
            uint32_t k = loop->frame_size;
            size_t base = m_.stack_.size();
            for (uint32_t i = 0; i < k; ++i) {
              Value v = sub(n->kids[i], env);
              m_.stack_.push_back(v);
            }
            if (lf != reusable) {
              lf = new_frame(k, lf->parent);
              reusable = loop->captures ? nullptr : lf;
            }
            for (uint32_t i = 0; i < k; ++i) lf->slots[i] = m_.stack_[base + i];
            m_.stack_.resize(base);
            env = lf;
            n = loop->kids[k];
            continue;
          }
          case NodeKind::PrimCall: {
            size_t base = m_.stack_.size();
            for (const Node* a : n->kids) {
              Value v = sub(a, env);
              m_.stack_.push_back(v);
            }
            Value r;
            try {
              r = prims_.call(int(n->slot), m_.stack_.data() + base, int(n->kids.size()));
            } catch (Error& e) {
              locate(e, n);
              throw;
            }
            m_.stack_.resize(base);
            return r;
          }
          case NodeKind::Call: {
            Value f = sub(n->kids[0], env);
            size_t base = m_.stack_.size();
            size_t argc = n->kids.size() - 1;
            for (size_t i = 1; i <= argc; ++i) {
              Value v = sub(n->kids[i], env);
              m_.stack_.push_back(v);
            }
            if (f.tag == Tag::Prim) {
              Value r;
              try {
                check_arity(int(f.cols), int(argc));
                r = prims_.call(int(f.cols), m_.stack_.data() + base, int(argc));
              } catch (Error& e) {
                locate(e, n);
                throw;
              }
              m_.stack_.resize(base);
              return r;
            }
            if (f.tag != Tag::Closure) fail_not_procedure(n, f);
            auto* c = static_cast<const Closure*>(f.ptr);
            const Node* lam = static_cast<const Node*>(c->code);
            check_closure_arity(n, lam->name, lam->nparams, lam->rest, argc);
            if (!depth.on) depth.enter();  // a non-tail call: one level deeper
            Frame* fr = new_frame(lam->frame_size, static_cast<Frame*>(c->env));
            for (uint32_t i = 0; i < lam->nparams; ++i) fr->slots[i] = m_.stack_[base + i];
            if (lam->rest) {
              Value rest = Value::nil();
              for (size_t i = argc; i > lam->nparams; --i) rest = m_.cons(m_.stack_[base + i - 1], rest);
              fr->slots[lam->nparams] = rest;
            }
            m_.stack_.resize(base);
            env = fr;
            running = n;
            reusable = nullptr;
            n = lam->kids[0];
            continue;
          }
        }
        NDVM_ASSERT(false);
      }
    } catch (Error& e) {
      locate(e, n);
      if (running) add_call_frame(e, running);
      throw;
    }
  }
};

// The client's entry point: one whole evaluation of x over the request's lanes.
template <class T>
void run(Machine<T>& m, const Expanded& x, const RunRequest& rq) {
  Eval<T> ev(m, x);
  execute(m, x, rq, [&]() { return ev.run(); });
}

}  // namespace ndvm::dmci

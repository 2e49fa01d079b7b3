// The expander's state and its helpers (scopes, name resolution, checked forms), shared by
// expand.cpp (the program's top level and expand_program) and expand_forms.cpp (the special
// forms). Internal to the core: only expand_program (ast.hpp) is its interface.
#pragma once
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ast.hpp"
#include "prims.hpp"
#include "stack.hpp"

namespace ndvm::expander {

const std::shared_ptr<Source>& prelude_source();
// The prelude's top-level definitions by name (the last of a name), made once.
const std::unordered_map<std::string, int32_t>& prelude_definitions();

// The special forms (kFormNames in expand.cpp spells them, in this order).
enum class Form : int8_t {
  Quote, If, Cond, Case, And, Or, When, Unless, Begin, Let, LetStar, Letrec, LetrecStar, Lambda,
  Define, Loop, Recur, Set, Quasiquote, DefineSyntax
};

// What a name means where nothing of the program binds it, as far as the name alone decides: a
// special form, pi, a primitive, a prelude definition (the expander takes them in this order).
struct Builtin {
  int8_t form = -1;      // a Form, or -1
  bool pi = false;
  int prim = -1;         // the primitive's id (the first of the name), or -1
  int32_t prelude = -1;  // the prelude's top-level definition of the name (its datum), or -1
};
// A name's entry, or null when it is none of these: one lookup of a view (no std::string made),
// where resolving a name looked in up to four tables (the primitives' name index among them).
// `hash` is name_hash(name) (a Source keeps its names': Source::sym_hash).
const Builtin* builtin(std::string_view name, size_t hash);

struct Scope {
  std::vector<std::string> names;
  Scope* parent = nullptr;
};

struct Ctx {
  Scope* scope;
  Scope* loop_scope;  // frame of the nearest enclosing loop (not across a lambda), or null
  const Node* loop;
  bool tail;          // in tail position with respect to that loop
};

class Expander {
 public:
  Expander(Expanded& x) : Expander(x, thread_globals()) {}  // (the thread's pair looked up once)

  // Expands the whole program (user definitions, prelude functions it uses, its expressions).
  void run();


 private:
  Expanded& X;
  const Source* const pre_;        // the prelude's Source (X.prelude_)
  const char* const stack_limit_;  // (native_stack_limit(), looked up once: it is thread-local)
  const Source* cur_ = nullptr;
  Node* root_ = nullptr;
  Scope root_scope_;
  std::unordered_map<std::string, uint32_t> user_slots_, prelude_slots_;
  std::vector<std::pair<uint32_t, const Node*>> prelude_inits_;
  uint64_t lambdas_ = 0;
  uint64_t loops_ = 0;
  bool data_prims_ = false;  // a name of the program resolved to a data primitive
  // What a symbol of the user's program names where no local or top-level definition binds it,
  // found once per symbol: its name decides it (the prelude's and free names' slots, once
  // given, stay theirs)
  enum class Global : uint8_t { Unknown, Special, Pi, Prim, Prelude, Free };
  struct Resolved {
    Global kind = Global::Unknown;
    bool looked = false;               // whether `builtin` is looked up yet
    const Builtin* builtin = nullptr;  // the name's entry in the built-in names, or null
    uint32_t slot = 0;
  };
  // By symbol, one vector a Source: the user's program's and (when it uses a prelude function)
  // the prelude's. One pair a thread, which its expansions reuse (the user's was an allocation
  // of each candidate's); no expansion starts while another runs on the thread.
  std::vector<Resolved>& globals_;
  std::vector<Resolved>& prelude_globals_;
  Resolved* resolved_ = nullptr;  // (cur_'s: read_from)
  static std::pair<std::vector<Resolved>, std::vector<Resolved>>& thread_globals() {
    static thread_local std::pair<std::vector<Resolved>, std::vector<Resolved>> both;
    return both;
  }
  Expander(Expanded& x, std::pair<std::vector<Resolved>, std::vector<Resolved>>& both)
      : X(x), pre_(x.prelude_.get()), stack_limit_(native_stack_limit()), globals_(both.first),
        prelude_globals_(both.second) {
    globals_.clear();  // (entries of the thread's last expansion, or of one that raised)
    prelude_globals_.clear();
  }

  // ---- helpers --------------------------------------------------------------------------------
  const Datum& D(int32_t d) const { return cur_->at(d); }
  int32_t kid(int32_t d, int i) const { return cur_->kid(D(d), i); }
  int count(int32_t d) const { return D(d).count; }

  [[noreturn]] void form_error(int32_t d, const std::string& msg) {
    Error e(ErrorKind::Form, msg, D(d).pos, cur_->show(d));
    e.file_ = cur_->name_;
    throw e;
  }
  [[noreturn]] void form_limit(int32_t d) {
    Error e(ErrorKind::Limit, "the program is nested too deeply for the native stack (run it in "
                              "a thread with a larger stack, or nest less deeply)",
            D(d).pos, cur_->show(d));
    e.file_ = cur_->name_;
    throw e;
  }
  bool is_sym(int32_t d) const { return D(d).kind == DatumKind::Sym; }
  const std::string& sym(int32_t d) const { return cur_->sym_name(d); }
  bool is_list(int32_t d) const { return D(d).kind == DatumKind::List && !D(d).dotted; }
  bool is_form(int32_t d, std::string_view name) const {
    return D(d).kind == DatumKind::List && D(d).count > 0 && is_sym(kid(d, 0)) &&
           sym(kid(d, 0)) == name;
  }
  Node* make(NodeKind k, int32_t d) { return X.make(k, cur_, d); }

  // (depth, slot) of a lexically bound name, or false.
  bool lookup_local(std::string_view name, Scope* s, uint32_t& depth, uint32_t& slot) const {
    uint32_t dd = 0;
    for (; s && s != &root_scope_; s = s->parent, ++dd) {
      for (size_t i = s->names.size(); i-- > 0;)
        if (s->names[i] == name) {
          depth = dd;
          slot = uint32_t(i);
          return true;
        }
    }
    return false;
  }
  uint32_t root_depth(Scope* s) const {
    uint32_t dd = 0;
    for (; s && s != &root_scope_; s = s->parent) ++dd;
    return dd;
  }
  bool shadowed(std::string_view name, Scope* s) const {
    uint32_t a, b;
    if (lookup_local(name, s, a, b)) return true;
    return !user_slots_.empty() && cur_ != pre_ && user_slots_.count(std::string(name));
  }

  // The built-in meaning of the symbol d's name (null: none), looked up once a symbol.
  const Builtin* builtin_of(int32_t d) {
    Resolved& g = resolved(d);
    if (!g.looked) {
      g.builtin = builtin(sym(d), cur_->sym_hash(d));
      g.looked = true;
    }
    return g.builtin;
  }

  // The special form the symbol d names (when nothing binds it), or -1.
  int special_form(int32_t d) {
    const Builtin* b = builtin_of(d);
    return b ? b->form : -1;
  }

  Resolved& resolved(int32_t d) {  // (the symbol d's entry in cur_'s vector)
    return resolved_[D(d).sym];
  }

  // Expands s's datums from here on: cur_ is s, and resolved_ its vector of entries, one a
  // symbol (made the first time; a Source's symbols are all read before it is expanded, so the
  // entries then stay put).
  void read_from(const Source* s) {
    cur_ = s;
    auto& v = s == &X.src_ ? globals_ : prelude_globals_;
    if (v.size() < s->symbols_.size()) v.resize(s->symbols_.size());
    resolved_ = v.data();
  }

  // What the symbol d names where no local or definition of the program binds it: a special
  // form, pi, a primitive, a prelude function (expanded the first time) or a free name
  // (numbered the first time). Found once per symbol of the program (and of the prelude).
  Resolved global(int32_t d) {
    Resolved& g = resolved(d);
    if (g.kind == Global::Unknown) {
      Resolved found = resolve_global(d);  // (it may expand a prelude function: g stays put)
      g.kind = found.kind;
      g.slot = found.slot;
    }
    return g;
  }

  Resolved resolve_global(int32_t d) {
    const std::string& name = sym(d);
    Resolved g;
    int64_t ps = -1;
    const Builtin* b = builtin_of(d);
    if (b && b->form >= 0) {
      g.kind = Global::Special;
    } else if (b && b->pi) {  // the one built-in constant; a let, a parameter or a define
      g.kind = Global::Pi;    // shadows it
    } else if (b && b->prim >= 0) {
      g.kind = Global::Prim;
      g.slot = uint32_t(b->prim);
      if (b->prim >= P_CONS) data_prims_ = true;  // (the data primitives follow the numeric)
    } else if (b && b->prelude >= 0 && (ps = prelude_slot(name, b->prelude)) >= 0) {
      g.kind = Global::Prelude;
      g.slot = uint32_t(ps);
    } else {
      if (cur_ == pre_)
        form_error(d, "internal: unbound name in the prelude: " + name);
      g.kind = Global::Free;  // (numbered once: global() resolves each of the program's
      g.slot = uint32_t(X.free_.size());  // symbols, one per name, once)
      FreeName& f = X.free_.emplace_back();  // (made in place: no FreeName moved and freed)
      f.name = name;
      f.pos = D(d).pos;
    }
    return g;
  }

  // Root slot of the prelude function `name` (defined by the prelude's datum `found`),
  // expanding its definition the first time it is used.
  int64_t prelude_slot(const std::string& name, int32_t found) {
    auto it = prelude_slots_.find(name);
    if (it != prelude_slots_.end()) return it->second;
    uint32_t slot = uint32_t(root_scope_.names.size());
    root_scope_.names.push_back(" prelude " + name);  // not visible to user lookups
    prelude_slots_[name] = slot;
    const Source* saved = cur_;
    read_from(pre_);
    Ctx c{&root_scope_, nullptr, nullptr, false};
    const Node* init = define_value(found, name, c);
    read_from(saved);
    prelude_inits_.emplace_back(slot, init);
    return slot;
  }

  const Node* variable(int32_t d, const std::string& name, const Ctx& c, bool call_head) {
    uint32_t depth, slot;
    if (lookup_local(name, c.scope, depth, slot)) {
      Node* n = make(NodeKind::Local, d);
      n->depth = depth;
      n->slot = slot;
      return n;
    }
    bool in_prelude = cur_ == pre_;
    if (!in_prelude && !user_slots_.empty()) {
      auto it = user_slots_.find(name);
      if (it != user_slots_.end()) {
        Node* n = make(NodeKind::Local, d);
        n->depth = root_depth(c.scope);
        n->slot = it->second;
        return n;
      }
    }
    const Resolved g = global(d);
    Node* n = nullptr;
    switch (g.kind) {
      case Global::Special:
        form_error(d, "'" + name + "' is a special form and cannot be used as a variable");
      case Global::Pi:
        n = make(NodeKind::Const, d);
        n->constant = Value::number(3.14159265358979323846);
        return n;
      case Global::Prim:
        n = make(call_head ? NodeKind::PrimCall : NodeKind::PrimRef, d);
        n->slot = g.slot;
        return n;
      case Global::Prelude:
        n = make(NodeKind::Local, d);
        n->depth = root_depth(c.scope);
        n->slot = g.slot;
        return n;
      case Global::Free:
      case Global::Unknown:
        break;
    }
    n = make(NodeKind::Free, d);
    n->slot = g.slot;
    return n;
  }

  std::string define_name(int32_t d) {
    if (count(d) < 2) form_error(d, "define: expected (define name expr) or (define (name args...) body...)");
    int32_t target = kid(d, 1);
    if (is_sym(target)) {
      if (count(d) != 3) form_error(d, "define: expected (define name expr)");
      return checked_name(target, "define");
    }
    if (D(target).kind == DatumKind::List && D(target).count > 0 && is_sym(kid(target, 0))) {
      if (count(d) < 3) form_error(d, "define: the procedure '" + sym(kid(target, 0)) + "' has no body");
      return checked_name(kid(target, 0), "define");
    }
    form_error(d, "define: expected a name or (name args...) after define");
  }

  std::string checked_name(int32_t d, const char* who) {
    if (!is_sym(d)) form_error(d, std::string(who) + ": expected a variable name, got " + cur_->show(d));
    return sym(d);  // special-form names may be rebound; they are then plain variables
  }

  const Node* define_value(int32_t d, const std::string& name, const Ctx& c) {
    int32_t target = kid(d, 1);
    if (is_sym(target)) return expand_named(kid(d, 2), name, c);
    // (define (name . params) body...) -> lambda over the params
    return lambda(d, target, 1, d, 2, name, c);
  }

  // Expands e; if it is a lambda, names it (for messages).
  const Node* expand_named(int32_t e, const std::string& name, const Ctx& c) {
    if (is_form(e, "lambda") && !shadowed("lambda", c.scope)) {
      if (count(e) < 3) form_error(e, "lambda: expected (lambda (params...) body...)");
      return lambda(e, kid(e, 1), 0, e, 2, name, c);
    }
    return expand(e, c);
  }

  // A lambda whose parameter list is datum `params` (skipping `skip` leading items, for the
  // define form's name) and whose body is kids [body_from, ...) of datum `body`.
  const Node* lambda(int32_t where, int32_t params, int skip, int32_t body, int body_from,
                     const std::string& name, const Ctx& c) {
    Node* n = make(NodeKind::Lambda, where);
    n->name = name.empty() ? std::string_view("lambda") : X.keep(name);
    ++lambdas_;
    auto scope = std::make_unique<Scope>();
    scope->parent = c.scope;
    if (is_sym(params) && skip == 0) {
      scope->names.push_back(checked_name(params, "lambda"));
      n->rest = true;
    } else if (D(params).kind == DatumKind::List) {
      int cnt = count(params);
      bool dotted = D(params).dotted;
      for (int i = skip; i < cnt; ++i) {
        std::string p = checked_name(kid(params, i), "lambda");
        for (auto& q : scope->names)
          if (q == p) form_error(kid(params, i), "lambda: duplicate parameter '" + p + "'");
        scope->names.push_back(p);
      }
      n->rest = dotted;
      n->nparams = uint32_t(scope->names.size()) - (dotted ? 1 : 0);
    } else {
      form_error(params, "lambda: expected a parameter list, got " + cur_->show(params));
    }
    if (n->rest && skip == 0 && is_sym(params)) n->nparams = 0;
    n->frame_size = uint32_t(scope->names.size());
    Ctx inner{scope.get(), nullptr, nullptr, false};
    n->kids.push_back(body_of(body, body_from, inner));
    scopes_.push_back(std::move(scope));
    return n;
  }

  std::vector<std::unique_ptr<Scope>> scopes_;

  Scope* new_scope(Scope* parent) {
    scopes_.push_back(std::make_unique<Scope>());
    scopes_.back()->parent = parent;
    return scopes_.back().get();
  }

  // A body: kids [from, ...) of datum d. Internal defines become one letrec* frame.
  const Node* body_of(int32_t d, int from, const Ctx& c) {
    int n = count(d);
    if (from >= n) form_error(d, std::string(cur_->sym_name(kid(d, 0))) + ": empty body");
    std::vector<int32_t> defs, exprs;
    for (int i = from; i < n; ++i) {
      int32_t e = kid(d, i);
      if (is_form(e, "define") && !shadowed("define", c.scope)) defs.push_back(e);
      else exprs.push_back(e);
    }
    if (exprs.empty()) form_error(defs.back(), "body has definitions but no expression after them");
    Ctx inner = c;
    Node* rec = nullptr;
    if (!defs.empty()) {
      rec = make(NodeKind::Letrec, defs.front());
      Scope* s = new_scope(c.scope);
      for (int32_t e : defs) {
        std::string nm = define_name(e);
        for (auto& q : s->names)
          if (q == nm) form_error(e, "duplicate definition of '" + nm + "' in one body");
        s->names.push_back(nm);
      }
      inner.scope = s;
      inner.tail = false;
      for (size_t i = 0; i < defs.size(); ++i) {
        rec->slots.push_back(uint32_t(i));
        rec->kids.push_back(define_value(defs[i], s->names[i], inner));
      }
      rec->frame_size = uint32_t(s->names.size());
      inner.tail = c.tail;
    }
    const Node* body;
    if (exprs.size() == 1) {
      body = expand(exprs[0], inner);
    } else {
      Node* b = make(NodeKind::Begin, exprs.front());
      Ctx nt = inner;
      nt.tail = false;
      for (size_t i = 0; i < exprs.size(); ++i)
        b->kids.push_back(expand(exprs[i], i + 1 == exprs.size() ? inner : nt));
      body = b;
    }
    if (!rec) return body;
    rec->kids.push_back(body);
    return rec;
  }

  Ctx nontail(const Ctx& c) const {
    Ctx r = c;
    r.tail = false;
    return r;
  }

  Node* constant(int32_t d, Value v) {
    Node* n = make(NodeKind::Const, d);
    n->constant = v;
    return n;
  }

  const Node* quote(int32_t d, int32_t q) {
    const Datum& x = D(q);
    switch (x.kind) {
      case DatumKind::Num: return constant(q, Value::number(x.num));
      case DatumKind::Bool: return constant(q, Value::boolean(x.num != 0));
      case DatumKind::Sym: return constant(q, Value::symbol(uint64_t(x.sym)));
      case DatumKind::List:
        if (x.count == 0) return constant(q, Value::nil());
        {
          Node* n = make(NodeKind::Quote, q);
          (void)d;
          return n;
        }
    }
    return constant(q, Value::nil());
  }

  // let-style bindings ((name init) ...): checks the shape; returns the binding datums.
  std::vector<int32_t> bindings(int32_t form, int32_t b, const char* who) {
    if (D(b).kind != DatumKind::List || D(b).dotted)
      form_error(form, std::string(who) + ": expected a list of bindings ((name value) ...)");
    std::vector<int32_t> out;
    for (int i = 0; i < count(b); ++i) {
      int32_t x = kid(b, i);
      if (!is_list(x) || count(x) != 2 || !is_sym(kid(x, 0)))
        form_error(x, std::string(who) + ": each binding must be (name value), got " + cur_->show(x));
      checked_name(kid(x, 0), who);
      out.push_back(x);
    }
    return out;
  }

  // The first binding whose name an earlier one has is an error. (Names compared as symbol ids:
  // one Source has one id a name. A few bindings are compared pairwise, without a set.)
  void no_duplicates(const std::vector<int32_t>& bs, const char* who) {
    auto duplicate = [&](int32_t x) {
      form_error(x, std::string(who) + ": duplicate binding of '" + sym(kid(x, 0)) + "'");
    };
    if (bs.size() <= 16) {
      for (size_t i = 1; i < bs.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (D(kid(bs[i], 0)).sym == D(kid(bs[j], 0)).sym) duplicate(bs[i]);
      return;
    }
    std::unordered_set<int32_t> seen;
    for (int32_t x : bs)
      if (!seen.insert(D(kid(x, 0)).sym).second) duplicate(x);
  }

  // ---- the expander proper (expand_forms.cpp) -------------------------------------------------
  const Node* expand(int32_t d, const Ctx& c);
  const Node* special(int32_t d, Form form, const std::string& f, const Ctx& c);
  Ctx scoped(const Ctx& c, Scope* s) const;
  const Node* sequence(int32_t d, int from, const Ctx& c);
  const Node* logic(int32_t d, int from, bool is_and, const Ctx& c);
  const Node* cond(int32_t d, int i, const Ctx& c);
  const Node* case_(int32_t d, const Ctx& c);
  const Node* let_(int32_t d, const Ctx& c);
  const Node* letrec(int32_t d, const std::string& f, const Ctx& c);
  const Node* loop(int32_t d, const Ctx& c);
  const Node* recur(int32_t d, const Ctx& c);
  const Node* let_star(int32_t d, const std::vector<int32_t>& bs, size_t i, const Ctx& c);
  const Node* named_let(int32_t d, const Ctx& c);
};

}  // namespace ndvm::expander

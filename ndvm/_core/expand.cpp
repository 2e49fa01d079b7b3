// The expander: checks every special form, desugars it into the small node language of ast.hpp
// and resolves every name once: lexical variables to (depth, slot), primitives to ids, prelude
// functions to root slots (only those the program uses), everything else to a free name.
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "ast.hpp"
#include "prims.hpp"
#include "stack.hpp"

namespace ndvm {

namespace {

const std::shared_ptr<Source>& prelude_source() {
  static std::shared_ptr<Source> src = read_source(prelude_text(), "<prelude>");
  return src;
}

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

const std::unordered_set<std::string>& special_forms() {
  static const std::unordered_set<std::string> s = {
      "quote", "if", "cond", "case", "and", "or", "when", "unless", "begin", "let", "let*",
      "letrec", "letrec*", "lambda", "define", "loop", "recur", "set!", "quasiquote",
      "define-syntax"};
  return s;
}

class Expander {
 public:
  Expander(Expanded& x) : X(x) {}

  void run() {
    const Source* user = X.src_.get();
    cur_ = user;
    Node* root = X.make(NodeKind::Letrec, user, user->top_.front());
    root_ = root;
    // top-level define names first, so any expression may refer to any of them
    std::vector<int32_t> defs, exprs;
    for (int32_t d : user->top_) {
      if (is_form(d, "define")) {
        std::string name = define_name(d);
        if (user_slots_.count(name)) form_error(d, "duplicate top-level definition of '" + name + "'");
        user_slots_[name] = uint32_t(root_scope_.names.size());
        root_scope_.names.push_back(name);
        defs.push_back(d);
      } else {
        exprs.push_back(d);
      }
    }
    if (exprs.empty())
      form_error(user->top_.back(), "the program has only definitions: add an expression to evaluate");
    Ctx c{&root_scope_, nullptr, nullptr, false};
    std::vector<std::pair<uint32_t, const Node*>> user_inits;
    for (int32_t d : defs) {
      std::string name = define_name(d);
      user_inits.emplace_back(user_slots_[name], define_value(d, name, c));
    }
    const Node* body;
    if (exprs.size() == 1) {
      body = expand(exprs[0], c);
    } else {
      Node* b = X.make(NodeKind::Begin, user, exprs.front());
      for (int32_t e : exprs) b->kids.push_back(expand(e, c));
      body = b;
    }
    X.result_ = X.make(NodeKind::Const, user, exprs.back());
    // prelude definitions (pulled in on demand) initialise before the user's
    for (auto& [slot, init] : prelude_inits_) {
      root->slots.push_back(slot);
      root->kids.push_back(init);
    }
    for (auto& [slot, init] : user_inits) {
      root->slots.push_back(slot);
      root->kids.push_back(init);
    }
    root->kids.push_back(body);
    root->frame_size = uint32_t(root_scope_.names.size());
    X.root_ = root;
  }

 private:
  Expanded& X;
  const Source* cur_ = nullptr;
  Node* root_ = nullptr;
  Scope root_scope_;
  std::unordered_map<std::string, uint32_t> user_slots_, prelude_slots_, free_index_;
  std::vector<std::pair<uint32_t, const Node*>> prelude_inits_;
  uint64_t lambdas_ = 0;

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
  bool is_form(int32_t d, const char* name) const {
    return D(d).kind == DatumKind::List && D(d).count > 0 && is_sym(kid(d, 0)) &&
           sym(kid(d, 0)) == name;
  }
  Node* make(NodeKind k, int32_t d) { return X.make(k, cur_, d); }

  // (depth, slot) of a lexically bound name, or false.
  bool lookup_local(const std::string& name, Scope* s, uint32_t& depth, uint32_t& slot) const {
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
  bool shadowed(const std::string& name, Scope* s) const {
    uint32_t a, b;
    if (lookup_local(name, s, a, b)) return true;
    return cur_ != prelude_source().get() && user_slots_.count(name);
  }

  // Root slot of a prelude function, expanding its definition the first time it is used.
  int64_t prelude_slot(const std::string& name) {
    auto it = prelude_slots_.find(name);
    if (it != prelude_slots_.end()) return it->second;
    const Source* pre = prelude_source().get();
    int32_t found = -1;
    for (int32_t d : pre->top_) {
      const Datum& dd = pre->at(d);
      int32_t head = pre->kid(dd, 1);
      int32_t nm = pre->at(head).kind == DatumKind::List ? pre->kid(pre->at(head), 0) : head;
      if (pre->sym_name(nm) == name) found = d;
    }
    if (found < 0) return -1;
    uint32_t slot = uint32_t(root_scope_.names.size());
    root_scope_.names.push_back(" prelude " + name);  // not visible to user lookups
    prelude_slots_[name] = slot;
    const Source* saved = cur_;
    cur_ = pre;
    Ctx c{&root_scope_, nullptr, nullptr, false};
    const Node* init = define_value(found, name, c);
    cur_ = saved;
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
    bool in_prelude = cur_ == prelude_source().get();
    if (!in_prelude) {
      auto it = user_slots_.find(name);
      if (it != user_slots_.end()) {
        Node* n = make(NodeKind::Local, d);
        n->depth = root_depth(c.scope);
        n->slot = it->second;
        return n;
      }
    }
    if (special_forms().count(name))
      form_error(d, "'" + name + "' is a special form and cannot be used as a variable");
    if (name == "pi") {  // the one built-in constant; a let, a parameter or a define shadows it
      Node* n = make(NodeKind::Const, d);
      n->constant = Value::number(3.14159265358979323846);
      return n;
    }
    int p = prim_lookup(name);
    if (p >= 0) {
      Node* n = make(call_head ? NodeKind::PrimCall : NodeKind::PrimRef, d);
      n->slot = uint32_t(p);
      return n;
    }
    int64_t ps = prelude_slot(name);
    if (ps >= 0) {
      Node* n = make(NodeKind::Local, d);
      n->depth = root_depth(c.scope);
      n->slot = uint32_t(ps);
      return n;
    }
    if (in_prelude) form_error(d, "internal: unbound name in the prelude: " + name);
    auto it = free_index_.find(name);
    uint32_t idx;
    if (it == free_index_.end()) {
      idx = uint32_t(X.free_.size());
      free_index_[name] = idx;
      X.free_.push_back({name, D(d).pos});
    } else {
      idx = it->second;
    }
    Node* n = make(NodeKind::Free, d);
    n->slot = idx;
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
    n->name = name.empty() ? "lambda" : name;
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

  void no_duplicates(const std::vector<int32_t>& bs, const char* who) {
    std::unordered_set<std::string> seen;
    for (int32_t x : bs)
      if (!seen.insert(sym(kid(x, 0))).second)
        form_error(x, std::string(who) + ": duplicate binding of '" + sym(kid(x, 0)) + "'");
  }

  // ---- the expander proper --------------------------------------------------------------------
  const Node* expand(int32_t d, const Ctx& c) {
    if (native_stack_exhausted()) form_limit(d);
    const Datum& x = D(d);
    switch (x.kind) {
      case DatumKind::Num: return constant(d, Value::number(x.num));
      case DatumKind::Bool: return constant(d, Value::boolean(x.num != 0));
      case DatumKind::Sym: return variable(d, sym(d), c, false);
      case DatumKind::List: break;
    }
    if (x.count == 0) form_error(d, "() is not an expression; write '() for the empty list");
    if (x.dotted) form_error(d, "a dotted list is not an expression");
    int32_t head = kid(d, 0);
    if (is_sym(head) && !shadowed(sym(head), c.scope) && special_forms().count(sym(head)))
      return special(d, sym(head), c);
    // an application
    const Node* op = D(head).kind == DatumKind::Sym ? variable(head, sym(head), c, true)
                                                    : expand(head, nontail(c));
    Ctx a = nontail(c);
    if (op->kind == NodeKind::PrimCall) {
      Node* n = const_cast<Node*>(op);
      n->datum = d;
      try {
        check_arity(int(n->slot), x.count - 1);
      } catch (Error& e) {
        e.pos_ = x.pos;
        e.form_ = cur_->show(d);
        e.file_ = cur_->name_;
        throw;
      }
      for (int i = 1; i < x.count; ++i) n->kids.push_back(expand(kid(d, i), a));
      return n;
    }
    Node* n = make(NodeKind::Call, d);
    n->kids.push_back(op);
    for (int i = 1; i < x.count; ++i) n->kids.push_back(expand(kid(d, i), a));
    return n;
  }

  const Node* special(int32_t d, const std::string& f, const Ctx& c) {
    int n = count(d);
    Ctx nt = nontail(c);
    if (f == "quote") {
      if (n != 2) form_error(d, "quote: expected exactly one datum");
      return quote(d, kid(d, 1));
    }
    if (f == "if") {
      if (n != 3 && n != 4) form_error(d, "if: expected (if test then) or (if test then else)");
      Node* r = make(NodeKind::If, d);
      r->kids.push_back(expand(kid(d, 1), nt));
      r->kids.push_back(expand(kid(d, 2), c));
      if (n == 4) r->kids.push_back(expand(kid(d, 3), c));
      return r;
    }
    if (f == "when" || f == "unless") {
      if (n < 3) form_error(d, f + ": expected (" + f + " test body...)");
      Node* r = make(NodeKind::If, d);
      const Node* test = expand(kid(d, 1), nt);
      if (f == "unless") {
        Node* neg = make(NodeKind::PrimCall, kid(d, 1));
        neg->slot = P_NOT;
        neg->kids.push_back(test);
        test = neg;
      }
      r->kids.push_back(test);
      r->kids.push_back(sequence(d, 2, c));
      return r;
    }
    if (f == "begin") {
      if (n < 2) form_error(d, "begin: expected at least one expression");
      return sequence(d, 1, c);
    }
    if (f == "and" || f == "or") {
      bool is_and = f == "and";
      if (n == 1) return constant(d, Value::boolean(is_and));
      return logic(d, 1, is_and, c);
    }
    if (f == "cond") return cond(d, 1, c);
    if (f == "case") return case_(d, c);
    if (f == "let") {
      if (n < 3) form_error(d, "let: expected (let ((name value) ...) body...)");
      if (is_sym(kid(d, 1))) return named_let(d, c);
      auto bs = bindings(d, kid(d, 1), "let");
      no_duplicates(bs, "let");
      Node* r = make(NodeKind::Let, d);
      Scope* s = new_scope(c.scope);
      for (int32_t b : bs) {
        r->kids.push_back(expand_named(kid(b, 1), sym(kid(b, 0)), nt));
        s->names.push_back(sym(kid(b, 0)));
      }
      r->frame_size = uint32_t(s->names.size());
      r->kids.push_back(body_of(d, 2, scoped(c, s)));
      return r;
    }
    if (f == "let*") {
      if (n < 3) form_error(d, "let*: expected (let* ((name value) ...) body...)");
      auto bs = bindings(d, kid(d, 1), "let*");
      return let_star(d, bs, 0, c);
    }
    if (f == "letrec" || f == "letrec*") {
      if (n < 3) form_error(d, f + ": expected (" + f + " ((name value) ...) body...)");
      auto bs = bindings(d, kid(d, 1), f.c_str());
      no_duplicates(bs, f.c_str());
      Node* r = make(NodeKind::Letrec, d);
      Scope* s = new_scope(c.scope);
      for (int32_t b : bs) s->names.push_back(sym(kid(b, 0)));
      Ctx inner = scoped(nt, s);
      for (size_t i = 0; i < bs.size(); ++i) {
        r->slots.push_back(uint32_t(i));
        r->kids.push_back(expand_named(kid(bs[i], 1), s->names[i], inner));
      }
      r->frame_size = uint32_t(s->names.size());
      r->kids.push_back(body_of(d, 2, scoped(c, s)));
      return r;
    }
    if (f == "lambda") {
      if (n < 3) form_error(d, "lambda: expected (lambda (params...) body...)");
      return lambda(d, kid(d, 1), 0, d, 2, "", c);
    }
    if (f == "loop") {
      if (n < 3) form_error(d, "loop: expected (loop ((name init) ...) body...)");
      auto bs = bindings(d, kid(d, 1), "loop");
      no_duplicates(bs, "loop");
      Node* r = make(NodeKind::Loop, d);
      Scope* s = new_scope(c.scope);
      for (int32_t b : bs) {
        r->kids.push_back(expand(kid(b, 1), nt));
        s->names.push_back(sym(kid(b, 0)));
      }
      r->frame_size = uint32_t(s->names.size());
      uint64_t before = lambdas_;
      Ctx inner{s, s, r, true};
      r->kids.push_back(body_of(d, 2, inner));
      r->captures = lambdas_ != before;
      return r;
    }
    if (f == "recur") {
      if (!c.loop) form_error(d, "recur: not inside a loop (or inside a lambda within the loop)");
      if (!c.tail) form_error(d, "recur: must be in tail position of its loop");
      int want = int(c.loop->frame_size);
      if (n - 1 != want)
        form_error(d, "recur: the loop has " + std::to_string(want) + " variable" +
                          (want == 1 ? "" : "s") + ", got " + std::to_string(n - 1) + " value" +
                          (n == 2 ? "" : "s"));
      Node* r = make(NodeKind::Recur, d);
      uint32_t depth = 0;
      for (Scope* s = c.scope; s != c.loop_scope; s = s->parent) ++depth;
      r->depth = depth;
      r->loop = c.loop;
      for (int i = 1; i < n; ++i) r->kids.push_back(expand(kid(d, i), nt));
      return r;
    }
    if (f == "define") form_error(d, "define: only allowed at the top level or at the start of a body");
    if (f == "set!") form_error(d, "set!: not supported: ndvm programs are immutable (use let or loop)");
    form_error(d, f + ": not supported by ndvm");
  }

  Ctx scoped(const Ctx& c, Scope* s) const {
    Ctx r = c;
    r.scope = s;
    return r;
  }

  const Node* sequence(int32_t d, int from, const Ctx& c) {
    int n = count(d);
    if (n - from == 1) return expand(kid(d, from), c);
    Node* b = make(NodeKind::Begin, d);
    Ctx nt = nontail(c);
    for (int i = from; i < n; ++i) b->kids.push_back(expand(kid(d, i), i + 1 == n ? c : nt));
    return b;
  }

  const Node* logic(int32_t d, int from, bool is_and, const Ctx& c) {
    int n = count(d);
    if (from == n - 1) return expand(kid(d, from), c);
    Node* r = make(is_and ? NodeKind::And : NodeKind::Or, d);
    r->kids.push_back(expand(kid(d, from), nontail(c)));
    r->kids.push_back(logic(d, from + 1, is_and, c));
    return r;
  }

  const Node* cond(int32_t d, int i, const Ctx& c) {
    int n = count(d);
    if (n < 2) form_error(d, "cond: expected at least one clause");
    if (i >= n) return constant(d, Value::unspec());
    int32_t cl = kid(d, i);
    if (!is_list(cl) || count(cl) < 1) form_error(cl, "cond: each clause must be (test body...)");
    int32_t test = kid(cl, 0);
    if (is_sym(test) && sym(test) == "else" && !shadowed("else", c.scope)) {
      if (i != n - 1) form_error(cl, "cond: else must be the last clause");
      if (count(cl) < 2) form_error(cl, "cond: else clause has no body");
      return sequence(cl, 1, c);
    }
    if (count(cl) >= 2 && is_sym(kid(cl, 1)) && sym(kid(cl, 1)) == "=>")
      form_error(cl, "cond: the => clause form is not supported");
    if (count(cl) == 1) {  // (test): the value of test when true
      Node* r = make(NodeKind::Or, cl);
      r->kids.push_back(expand(test, nontail(c)));
      r->kids.push_back(cond(d, i + 1, c));
      return r;
    }
    Node* r = make(NodeKind::If, cl);
    r->kids.push_back(expand(test, nontail(c)));
    r->kids.push_back(sequence(cl, 1, c));
    r->kids.push_back(cond(d, i + 1, c));
    return r;
  }

  // (case key ((d...) body...) ... (else body...)) -> a one-slot frame holding key and a chain of
  // ifs testing (eqv? key 'd).
  const Node* case_(int32_t d, const Ctx& c) {
    int n = count(d);
    if (n < 3) form_error(d, "case: expected (case key ((datum ...) body...) ...)");
    Node* r = make(NodeKind::Let, d);
    r->kids.push_back(expand(kid(d, 1), nontail(c)));
    Scope* s = new_scope(c.scope);
    s->names.push_back(" case key");
    r->frame_size = 1;
    Ctx inner = scoped(c, s);
    const Node* chain = constant(d, Value::unspec());
    for (int i = n - 1; i >= 2; --i) {
      int32_t cl = kid(d, i);
      if (!is_list(cl) || count(cl) < 2) form_error(cl, "case: each clause must be ((datum ...) body...)");
      int32_t ds = kid(cl, 0);
      const Node* body = sequence(cl, 1, inner);
      if (is_sym(ds) && sym(ds) == "else") {
        if (i != n - 1) form_error(cl, "case: else must be the last clause");
        chain = body;
        continue;
      }
      if (!is_list(ds)) form_error(ds, "case: expected a list of datums or else");
      const Node* test = constant(ds, Value::boolean(false));
      for (int k = count(ds) - 1; k >= 0; --k) {
        Node* key = make(NodeKind::Local, kid(d, 1));
        key->depth = 0;
        key->slot = 0;
        Node* eq = make(NodeKind::PrimCall, kid(ds, k));
        eq->slot = P_EQVP;
        eq->kids.push_back(key);
        eq->kids.push_back(quote(kid(ds, k), kid(ds, k)));
        if (k == count(ds) - 1) {
          test = eq;
        } else {
          Node* o = make(NodeKind::Or, ds);
          o->kids.push_back(eq);
          o->kids.push_back(test);
          test = o;
        }
      }
      Node* iff = make(NodeKind::If, cl);
      iff->kids.push_back(test);
      iff->kids.push_back(body);
      iff->kids.push_back(chain);
      chain = iff;
    }
    r->kids.push_back(chain);
    return r;
  }

  const Node* let_star(int32_t d, const std::vector<int32_t>& bs, size_t i, const Ctx& c) {
    if (i == bs.size()) return body_of(d, 2, c);
    Node* r = make(NodeKind::Let, bs[i]);
    r->kids.push_back(expand_named(kid(bs[i], 1), sym(kid(bs[i], 0)), nontail(c)));
    Scope* s = new_scope(c.scope);
    s->names.push_back(sym(kid(bs[i], 0)));
    r->frame_size = 1;
    r->kids.push_back(let_star(d, bs, i + 1, scoped(c, s)));
    return r;
  }

  // (let name ((v init) ...) body...) -> ((letrec ((name (lambda (v ...) body...))) name) init ...)
  const Node* named_let(int32_t d, const Ctx& c) {
    if (count(d) < 4) form_error(d, "let: expected (let name ((var init) ...) body...)");
    std::string name = checked_name(kid(d, 1), "let");
    auto bs = bindings(d, kid(d, 2), "let");
    no_duplicates(bs, "let");
    Node* call = make(NodeKind::Call, d);
    Node* rec = make(NodeKind::Letrec, d);
    Scope* s = new_scope(c.scope);
    s->names.push_back(name);
    Node* lam = make(NodeKind::Lambda, d);
    lam->name = name;
    ++lambdas_;
    Scope* ps = new_scope(s);
    for (int32_t b : bs) ps->names.push_back(sym(kid(b, 0)));
    lam->nparams = uint32_t(ps->names.size());
    lam->frame_size = lam->nparams;
    lam->kids.push_back(body_of(d, 3, Ctx{ps, nullptr, nullptr, false}));
    rec->slots.push_back(0);
    rec->kids.push_back(lam);
    Node* ref = make(NodeKind::Local, kid(d, 1));
    ref->depth = 0;
    ref->slot = 0;
    rec->kids.push_back(ref);
    rec->frame_size = 1;
    call->kids.push_back(rec);
    for (int32_t b : bs) call->kids.push_back(expand(kid(b, 1), nontail(c)));
    return call;
  }
};

}  // namespace

std::shared_ptr<const Expanded> expand_program(const std::string& text, const std::string& name) {
  auto x = std::make_shared<Expanded>();
  x->src_ = read_source(text, name);
  x->prelude_ = prelude_source();
  Expander(*x).run();
  return x;
}

}  // namespace ndvm

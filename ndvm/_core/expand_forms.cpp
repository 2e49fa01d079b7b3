// The special forms of the expander (see expander.hpp): each checked and desugared into the node
// language of ast.hpp (if, cond, case, and/or, let forms, lambda, loop/recur, quasiquote, ...).
#include "expander.hpp"

namespace ndvm::expander {

// ---- the expander proper --------------------------------------------------------------------
const Node* Expander::expand(int32_t d, const Ctx& c) {
  if (native_stack_exhausted(stack_limit_)) form_limit(d);
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
  if (is_sym(head)) {
    const int form = special_form(head);
    if (form >= 0 && !shadowed(sym(head), c.scope)) return special(d, Form(form), sym(head), c);
  }
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
    n->kids.reserve(size_t(x.count - 1));  // (one allocation for the kids, not one per doubling)
    for (int i = 1; i < x.count; ++i) n->kids.push_back(expand(kid(d, i), a));
    return n;
  }
  Node* n = make(NodeKind::Call, d);
  n->kids.reserve(size_t(x.count));
  n->kids.push_back(op);
  for (int i = 1; i < x.count; ++i) n->kids.push_back(expand(kid(d, i), a));
  return n;
}

// The special form `form` (spelt f, for messages) at datum d.
const Node* Expander::special(int32_t d, Form form, const std::string& f, const Ctx& c) {
  int n = count(d);
  Ctx nt = nontail(c);
  switch (form) {
    case Form::Quote:
      if (n != 2) form_error(d, "quote: expected exactly one datum");
      return quote(d, kid(d, 1));
    case Form::If: {
      if (n != 3 && n != 4) form_error(d, "if: expected (if test then) or (if test then else)");
      Node* r = make(NodeKind::If, d);
      r->kids.reserve(size_t(n - 1));
      r->kids.push_back(expand(kid(d, 1), nt));
      r->kids.push_back(expand(kid(d, 2), c));
      if (n == 4) r->kids.push_back(expand(kid(d, 3), c));
      return r;
    }
    case Form::When:
    case Form::Unless: {
      if (n < 3) form_error(d, f + ": expected (" + f + " test body...)");
      Node* r = make(NodeKind::If, d);
      const Node* test = expand(kid(d, 1), nt);
      if (form == Form::Unless) {
        Node* neg = make(NodeKind::PrimCall, kid(d, 1));
        neg->slot = P_NOT;
        neg->kids.push_back(test);
        test = neg;
      }
      r->kids.push_back(test);
      r->kids.push_back(sequence(d, 2, c));
      return r;
    }
    case Form::Begin:
      if (n < 2) form_error(d, "begin: expected at least one expression");
      return sequence(d, 1, c);
    case Form::And:
    case Form::Or: {
      bool is_and = form == Form::And;
      if (n == 1) return constant(d, Value::boolean(is_and));
      return logic(d, 1, is_and, c);
    }
    case Form::Cond: return cond(d, 1, c);
    case Form::Case: return case_(d, c);
    case Form::Let: return let_(d, c);
    case Form::LetStar: {
      if (n < 3) form_error(d, "let*: expected (let* ((name value) ...) body...)");
      auto bs = bindings(d, kid(d, 1), "let*");
      return let_star(d, bs, 0, c);
    }
    case Form::Letrec:
    case Form::LetrecStar: return letrec(d, f, c);
    case Form::Lambda:
      if (n < 3) form_error(d, "lambda: expected (lambda (params...) body...)");
      return lambda(d, kid(d, 1), 0, d, 2, "", c);
    case Form::Loop: return loop(d, c);
    case Form::Recur: return recur(d, c);
    case Form::Define:
      form_error(d, "define: only allowed at the top level or at the start of a body");
    case Form::Set:
      form_error(d, "set!: not supported: ndvm programs are immutable (use let or loop)");
    case Form::Quasiquote:
    case Form::DefineSyntax: break;
  }
  form_error(d, f + ": not supported by ndvm");
}

const Node* Expander::let_(int32_t d, const Ctx& c) {
  int n = count(d);
  Ctx nt = nontail(c);
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

const Node* Expander::letrec(int32_t d, const std::string& f, const Ctx& c) {
  int n = count(d);
  Ctx nt = nontail(c);
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

const Node* Expander::loop(int32_t d, const Ctx& c) {
  int n = count(d);
  Ctx nt = nontail(c);
  if (n < 3) form_error(d, "loop: expected (loop ((name init) ...) body...)");
  auto bs = bindings(d, kid(d, 1), "loop");
  no_duplicates(bs, "loop");
  Node* r = make(NodeKind::Loop, d);
  ++loops_;
  r->kids.reserve(bs.size() + 1);
  Scope* s = new_scope(c.scope);
  s->names.reserve(bs.size());
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

const Node* Expander::recur(int32_t d, const Ctx& c) {
  int n = count(d);
  Ctx nt = nontail(c);
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
  r->kids.reserve(size_t(n - 1));
  for (int i = 1; i < n; ++i) r->kids.push_back(expand(kid(d, i), nt));
  return r;
}

Ctx Expander::scoped(const Ctx& c, Scope* s) const {
  Ctx r = c;
  r.scope = s;
  return r;
}

const Node* Expander::sequence(int32_t d, int from, const Ctx& c) {
  int n = count(d);
  if (n - from == 1) return expand(kid(d, from), c);
  Node* b = make(NodeKind::Begin, d);
  Ctx nt = nontail(c);
  for (int i = from; i < n; ++i) b->kids.push_back(expand(kid(d, i), i + 1 == n ? c : nt));
  return b;
}

const Node* Expander::logic(int32_t d, int from, bool is_and, const Ctx& c) {
  int n = count(d);
  if (from == n - 1) return expand(kid(d, from), c);
  Node* r = make(is_and ? NodeKind::And : NodeKind::Or, d);
  r->kids.push_back(expand(kid(d, from), nontail(c)));
  r->kids.push_back(logic(d, from + 1, is_and, c));
  return r;
}

const Node* Expander::cond(int32_t d, int i, const Ctx& c) {
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
const Node* Expander::case_(int32_t d, const Ctx& c) {
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

const Node* Expander::let_star(int32_t d, const std::vector<int32_t>& bs, size_t i,
                               const Ctx& c) {
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
const Node* Expander::named_let(int32_t d, const Ctx& c) {
  if (count(d) < 4) form_error(d, "let: expected (let name ((var init) ...) body...)");
  std::string name = checked_name(kid(d, 1), "let");
  auto bs = bindings(d, kid(d, 2), "let");
  no_duplicates(bs, "let");
  Node* call = make(NodeKind::Call, d);
  Node* rec = make(NodeKind::Letrec, d);
  Scope* s = new_scope(c.scope);
  s->names.push_back(name);
  Node* lam = make(NodeKind::Lambda, d);
  lam->name = X.keep(name);
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
}  // namespace ndvm::expander

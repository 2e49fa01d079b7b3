// What every client's walk of a program shares, so that the clients differ only in how they walk:
// the letrec "unassigned" marker, the call errors' texts, the Scheme backtrace line, and the
// mixed branch (both arms under lane masks, merged by a recorded select).
#pragma once
#include <string>

#include "execute.hpp"

namespace ndvm {

// A slot that a letrec has not assigned yet (an unspecified value with a flag set).
inline Value unassigned() {
  Value v = Value::unspec();
  v.flags = 1;
  return v;
}

inline bool is_unassigned(const Value& v) { return v.tag == Tag::Unspec && v.flags; }

// The error for reading the variable `at` while its letrec slot is still unassigned.
[[noreturn]] inline void fail_unassigned(const Node* at) {
  fail_at(at, ErrorKind::Eval, "'" + at->form() + "' is used before its definition is evaluated");
}

// The error for calling a value that is not a procedure at `call`.
[[noreturn]] inline void fail_not_procedure(const Node* call, const Value& f) {
  fail_at(call, ErrorKind::Eval, std::string("not a procedure: the operator '") +
                                     call->kids[0]->form() + "' is " + tag_name(f.tag));
}

// The error for calling a closure `name` (nparams, plus a rest list when `rest`) with argc
// arguments, or nothing. The test is inline on every call; the message is built out of line.
[[noreturn]] __attribute__((noinline, cold)) inline void closure_arity_error(
    const Node* call, std::string_view name, uint32_t nparams, bool rest, size_t argc) {
  fail_at(call, ErrorKind::Eval,
          std::string(name) + ": expects " + (rest ? "at least " : "") +
              arity_text(int(nparams)) + ", got " + std::to_string(argc));
}

inline void check_closure_arity(const Node* call, std::string_view name, uint32_t nparams,
                                bool rest, size_t argc) {
  if (argc < nparams || (!rest && argc != nparams))
    closure_arity_error(call, name, nparams, rest, argc);
}

// One line of the Scheme backtrace for the activation that the call `site` entered.
inline void add_call_frame(Error& e, const Node* site) {
  const Node* callee = site->kids[0];
  SrcPos p = site->pos();
  add_backtrace(e, "in " + (callee->kind == NodeKind::Lambda ? std::string("lambda")
                                                              : callee->form()) +
                       ", called at " + site->src->name_ + ":" + std::to_string(p.line) + ":" +
                       std::to_string(p.col));
}

// A branch whose test differs across live lanes: each side runs under the mask of the lanes that
// take it (then_side() and else_side() return its value) and the two are merged by a select
// that the tape records.
template <class T, class Then, class Else>
Value mixed_branch(Machine<T>& m, const Value& test, Then&& then_side, Else&& else_side) {
  int32_t saved = m.live_;
  int32_t mt = m.branch_mask(test, true);
  int32_t mf = m.branch_mask(test, false);
  m.live_ = mt;
  Value a = then_side();
  m.live_ = mf;
  Value b = else_side();
  m.live_ = saved;
  return m.select(mt, a, b);
}

}  // namespace ndvm

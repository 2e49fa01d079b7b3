// The expander: checks every special form, desugars it into the small node language of ast.hpp
// and resolves every name once: lexical variables to (depth, slot), primitives to ids, prelude
// functions to root slots (only those the program uses), everything else to a free name.
#include "expander.hpp"
#include "hash.hpp"

namespace ndvm {

namespace expander {

const std::shared_ptr<Source>& prelude_source() {
  static std::shared_ptr<Source> src = read_source(prelude_text(), "<prelude>");
  return src;
}

const std::unordered_map<std::string, int32_t>& prelude_definitions() {
  static const std::unordered_map<std::string, int32_t> index = [] {
    std::unordered_map<std::string, int32_t> m;
    const Source* pre = prelude_source().get();
    for (int32_t d : pre->top_) {
      const Datum& dd = pre->at(d);
      int32_t head = pre->kid(dd, 1);
      int32_t nm = pre->at(head).kind == DatumKind::List ? pre->kid(pre->at(head), 0) : head;
      m[pre->sym_name(nm)] = d;
    }
    return m;
  }();
  return index;
}

// The special forms' names, in the order of Form.
constexpr const char* kFormNames[] = {
    "quote", "if", "cond", "case", "and", "or", "when", "unless", "begin", "let", "let*",
    "letrec", "letrec*", "lambda", "define", "loop", "recur", "set!", "quasiquote",
    "define-syntax"};
static_assert(sizeof kFormNames / sizeof *kFormNames == size_t(Form::DefineSyntax) + 1,
              "one name a Form");

namespace {

// The built-in names frozen into open addressing over a power-of-two array, at most a quarter
// full, hashed by FNV-1a: every distinct symbol of a program is looked up once, most of them not
// found (its free names), and std::unordered_map's hash call and prime modulo cost more than the
// rest of such a lookup.
class BuiltinTable {
 public:
  explicit BuiltinTable(const std::unordered_map<std::string_view, Builtin>& entries) {
    size_t n = 16;
    while (n < 4 * entries.size()) n *= 2;
    slots_.resize(n);
    mask_ = n - 1;
    for (const auto& [name, b] : entries) {
      size_t i = name_hash(name) & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = Slot{true, name, b};
    }
  }
  const Builtin* find(std::string_view name, size_t hash) const {  // (hash: name_hash(name))
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.name == name) return &s.value;
    }
  }

 private:
  struct Slot {
    bool used = false;
    std::string_view name;
    Builtin value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace

const Builtin* builtin(std::string_view name, size_t hash) {
  // (the keys view text that lives as long as the table: the literals above, the primitives'
  // names and the keys of prelude_definitions)
  static const BuiltinTable table([] {
    std::unordered_map<std::string_view, Builtin> m;
    for (size_t f = 0; f < sizeof kFormNames / sizeof *kFormNames; ++f)
      m[kFormNames[f]].form = int8_t(f);
    m["pi"].pi = true;
    for (int i = P_COUNT - 1; i >= 0; --i) m[prim_info(i).name].prim = i;  // (the first of a name)
    for (const auto& [nm, d] : prelude_definitions()) m[nm].prelude = d;
    return m;
  }());
  return table.find(name, hash);
}

void Expander::run() {
  const Source* user = &X.src_;
  read_from(user);
  Node* root = X.make(NodeKind::Letrec, user, user->top_.front());
  root_ = root;
  // top-level define names first, so any expression may refer to any of them (the top-level
  // datums are walked again below, not listed: most programs are one expression, and the lists
  // were two allocations of each)
  size_t nexprs = 0;
  int32_t first_expr = -1, last_expr = -1;
  for (int32_t d : user->top_) {
    if (is_form(d, "define")) {
      std::string name = define_name(d);
      if (user_slots_.count(name)) form_error(d, "duplicate top-level definition of '" + name + "'");
      user_slots_[name] = uint32_t(root_scope_.names.size());
      root_scope_.names.push_back(name);
    } else {
      if (nexprs++ == 0) first_expr = d;
      last_expr = d;
    }
  }
  if (nexprs == 0)
    form_error(user->top_.back(), "the program has only definitions: add an expression to evaluate");
  Ctx c{&root_scope_, nullptr, nullptr, false};
  std::vector<std::pair<uint32_t, const Node*>> user_inits;
  for (int32_t d : user->top_) {
    if (!is_form(d, "define")) continue;
    std::string name = define_name(d);
    user_inits.emplace_back(user_slots_[name], define_value(d, name, c));
  }
  const Node* body;
  if (nexprs == 1) {
    body = expand(first_expr, c);
  } else {
    Node* b = X.make(NodeKind::Begin, user, first_expr);
    b->kids.reserve(nexprs);
    for (int32_t e : user->top_)
      if (!is_form(e, "define")) b->kids.push_back(expand(e, c));
    body = b;
  }
  X.result_ = X.make(NodeKind::Const, user, last_expr);
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
  X.bounded_ = lambdas_ == 0 && loops_ == 0 && !data_prims_;
}

}  // namespace expander


std::shared_ptr<const Expanded> expand_program(std::string_view text, const std::string& name) {
  auto x = std::make_shared<Expanded>();
  x->reserve_for(text.size());
  read_into(x->src_, text, name);
  x->prelude_ = expander::prelude_source();
  x->free_.reserve(x->src_.symbols_.size());  // (a free name is one of the symbols)
  expander::Expander(*x).run();
  return x;
}

}  // namespace ndvm

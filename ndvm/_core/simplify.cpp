// The canonical form's rewrite rules (simplify.hpp; the user-facing description is the Python
// module ndvm.cosearch.simplify's). They mirror one for one the Python rules they replaced, whose
// outputs tests/simplify_golden.jsonl.gz holds, errors on malformed trees included (an index past
// a list's end is IndexError, a list where a name is looked up TypeError, as in Python).
#include "simplify.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "hash.hpp"
#include "stack.hpp"

#pragma GCC visibility push(hidden)  // (see simplify.hpp)
namespace ndvm::simp {

namespace {

struct Raise {
  Err kind;
  std::string message;
};

// (cold, and its message made in it from a literal: the rules' many checks then keep their
// failing branches out of the code a canonical form runs, which the calibrations between two
// rounds evict from the instruction cache)
[[noreturn, gnu::cold, gnu::noinline]] void raise(Err kind, std::string message) {
  throw Raise{kind, std::move(message)};
}
[[noreturn, gnu::cold, gnu::noinline]] void raise(Err kind, const char* message) {
  raise(kind, std::string(message));
}

// The arithmetic heads (kFirstArith..kLastArith), the folded among them and the special forms.
bool arithmetic(Head h) { return h >= kFirstArith && h <= kLastArith; }
bool folded(Head h) { return h >= kFirstFold && h <= kLastArith; }
bool special(Head h) { return h >= kFirstSpecial; }

// The value of a unary function folded over a literal (square apart: exact over integers; any
// other head gives nan).
double unary_function(Head h, double a) {
  switch (h) {
    case kSin: return std::sin(a);
    case kCos: return std::cos(a);
    case kExp: return std::exp(a);
    case kLog: return std::log(a);
    case kSqrt: return std::sqrt(a);
    case kTanh: return std::tanh(a);
    case kTan: return std::tan(a);
    case kAtan: return std::atan(a);
    case kAbs: return std::fabs(a);
    default: return std::nan("");
  }
}

// Python's repr of a finite float (shortest round trip; exponent outside [-4, 16)).
std::string float_repr(double d) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  size_t p = 0;
  if (sci[0] == '-') {
    sign = "-";
    p = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= n) {
    out = digits + std::string(decpt - n, '0') + ".0";
  } else {
    out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return sign + out;
}

std::string nonfinite_repr(double d) {
  if (std::isnan(d)) return "nan";
  return d > 0 ? "inf" : "-inf";
}

// math.fsum of xs[0..count): the correctly rounded sum (Shewchuk's partials, kept in the
// caller's room for count of them: there are never more); nullopt when it is not finite.
std::optional<double> fsum(const double* xs, size_t count, double* partials) {
  size_t n = 0;  // the partials
  for (size_t q = 0; q < count; ++q) {
    double x = xs[q];
    if (!std::isfinite(x)) return std::nullopt;
    size_t i = 0;
    for (size_t j = 0; j < n; ++j) {
      double y = partials[j];
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      double hi = x + y;
      double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    if (!std::isfinite(x)) return std::nullopt;  // intermediate overflow
    n = i;
    partials[n++] = x;
  }
  double hi = 0.0;
  if (n > 0) {
    hi = partials[--n];
    double lo = 0.0;
    while (n > 0) {
      double x = hi;
      double y = partials[--n];
      hi = x + y;
      double yr = hi - x;
      lo = y - yr;
      if (lo != 0.0) break;
    }
    if (n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0))) {
      double y = lo * 2.0;
      double x = hi + y;
      double yr = x - hi;
      if (y == yr) hi = x;
    }
  }
  return hi;
}

}  // namespace

const char* const kHeadNames[kHeads] = {
    "",
    "+", "-", "*", "/",
    "sin", "cos", "exp", "log", "sqrt", "tanh", "tan", "atan", "abs", "square",
    "pow", "expt",
    "quote", "if", "cond", "case", "and", "or", "when", "unless", "begin", "let",
    "let*", "letrec", "letrec*", "lambda", "define", "loop", "recur", "else",
};

const std::vector<std::string>& arithmetic_heads() {
  static const std::vector<std::string> heads(kHeadNames + kFirstArith,
                                              kHeadNames + kLastArith + 1);
  return heads;
}

using N = Node*;

// n items copied from ``from`` to ``to`` (not overlapping), n most often a handful: one move
// each (a call to memmove each, for a list's few items, was a twentieth of the rules' work).
template <class T>
[[gnu::always_inline]] inline void copy_few(T* to, const T* from, size_t n) {
  switch (n) {
    case 8: to[7] = from[7]; [[fallthrough]];
    case 7: to[6] = from[6]; [[fallthrough]];
    case 6: to[5] = from[5]; [[fallthrough]];
    case 5: to[4] = from[4]; [[fallthrough]];
    case 4: to[3] = from[3]; [[fallthrough]];
    case 3: to[2] = from[2]; [[fallthrough]];
    case 2: to[1] = from[1]; [[fallthrough]];
    case 1: to[0] = from[0]; [[fallthrough]];
    case 0: break;
    default: std::memcpy(to, from, n * sizeof(T));
  }
}

// A vector of trivially copyable T with room for K of them inline: the rules make many short
// lists of Nodes, most of them a handful long, and a heap allocation for each was a fifth of
// the canonical form's time.
template <class T, size_t K>
class SmallVec {
 public:
  SmallVec() = default;
  SmallVec(std::initializer_list<T> xs) { append(xs.begin(), xs.end()); }
  template <class It>
  SmallVec(It first, It last) { append(first, last); }
  SmallVec(const SmallVec& o) { append(o.begin(), o.end()); }
  SmallVec(SmallVec&& o) noexcept { take(o); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) {
      n_ = 0;
      append(o.begin(), o.end());
    }
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  SmallVec& operator=(std::initializer_list<T> xs) {
    SmallVec tmp(xs);
    return *this = std::move(tmp);
  }
  ~SmallVec() { release(); }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }
  T& operator[](size_t k) { return p_[k]; }
  const T& operator[](size_t k) const { return p_[k]; }
  void reserve(size_t n) {
    if (n > cap_) grow(n);
  }
  // (inlined where it is called, its rare growth not: a call each item was a twentieth of a
  // canonical form's instructions)
  [[gnu::always_inline]] void push_back(T x) {
    if (__builtin_expect(n_ == cap_, 0)) grow(2 * cap_);
    p_[n_++] = x;
  }
  T* insert(T* pos, T x) { return insert(pos, &x, &x + 1); }
  T* erase(T* pos) {
    std::memmove(pos, pos + 1, (static_cast<size_t>(end() - pos) - 1) * sizeof(T));
    --n_;
    return pos;
  }
  template <class It>
  T* insert(T* pos, It first, It last) {
    size_t at = static_cast<size_t>(pos - p_);
    size_t k = static_cast<size_t>(std::distance(first, last));
    if (n_ + k > cap_) grow(std::max(2 * cap_, n_ + k));
    if (at < n_) std::memmove(p_ + at + k, p_ + at, (n_ - at) * sizeof(T));
    if (k) copy_few(p_ + at, &*first, k);
    n_ += k;
    return p_ + at;
  }

 private:
  template <class It>
  void append(It first, It last) {
    size_t k = static_cast<size_t>(std::distance(first, last));
    reserve(n_ + k);
    if (k) copy_few(p_ + n_, &*first, k);
    n_ += k;
  }
  [[gnu::noinline]] void grow(size_t cap) {
    T* p = new T[cap];
    std::memcpy(p, p_, n_ * sizeof(T));
    release();
    p_ = p;
    cap_ = cap;
  }
  void release() {
    if (p_ != room()) delete[] p_;
    p_ = room();
    cap_ = K;
  }
  void take(SmallVec& o) {
    n_ = o.n_;
    if (o.p_ == o.room()) {
      p_ = room();
      cap_ = K;
      copy_few(room(), o.room(), n_);
    } else {
      p_ = o.p_;
      cap_ = o.cap_;
      o.p_ = o.room();
      o.cap_ = K;
    }
    o.n_ = 0;
  }
  // the inline room, left as it is when a SmallVec is made (T trivially copyable: a text's
  // view, say, whose constructor zeroes it, made K times for each SmallVec of them)
  alignas(T) unsigned char room_[K * sizeof(T)];
  T* room() { return reinterpret_cast<T*>(room_); }
  T* p_ = room();
  size_t n_ = 0, cap_ = K;
};
using Ns = SmallVec<Node*, 8>;

// A pair (c, rest), both null for Python's (None, None).
struct Split {
  N c = nullptr;
  N rest = nullptr;
};

// A number Python-style: an exact integer or a float.
struct Num {
  bool is_int;
  __int128 i;
  double f;
  double as_float() const { return is_int ? static_cast<double>(i) : f; }
};

struct Rules {
  Simplifier& owner_;
  // (this thread's stack limit, looked up once a call: guard runs dozens of times a canonical
  // form, and reading the thread_local from this shared library is a __tls_get_addr call)
  char* const stack_limit_;
  explicit Rules(Simplifier& owner) : owner_(owner), stack_limit_(native_stack_limit()) {}

  // -- atoms and Python's operations on them -------------------------------------------------

  static bool L(N t) { return t->kind == Kind::List; }
  static bool is_str(N t) { return t->kind == Kind::Sym; }
  static bool num(N t) { return t->kind == Kind::Int || t->kind == Kind::Float; }
  static double val(N t) { return t->kind == Kind::Int ? static_cast<double>(t->i) : t->f; }
  // (inlined where they are called, as guard and the known Facts of ``facts``: a call each
  // was a tenth of a canonical form's instructions)
  // t is the symbol of head h (only a symbol's Node has a head code)
  [[gnu::always_inline]] static bool is(N t, Head h) { return t->head == h; }
  // Python's a == k for a number k (int or float) and an atom a that _num accepts
  static bool num_eq(N t, double k) { return num(t) && val(t) == k; }
  static size_t len(N t) { return t->items.size(); }

  [[gnu::always_inline]] void guard() const {
    if (__builtin_expect(native_stack_exhausted(stack_limit_), 0)) stack_exhausted();
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void stack_exhausted() {
    raise(Err::Recursion,
          "maximum recursion depth exceeded in the simplifier (the tree is nested too deeply "
          "for this thread's native stack)");
  }

  // Python's t[k] (IndexError past a list's end; a str gives its k-th character; a number is
  // not subscriptable)
  N at(N t, size_t k) {
    if (__builtin_expect(t->kind == Kind::List && k < t->items.size(), 1)) return t->items[k];
    return at_other(t, k);
  }
  // (at's rare cases, out of the rules' code)
  [[gnu::cold, gnu::noinline]] N at_other(N t, size_t k) {
    if (t->kind == Kind::List) raise(Err::Index, "list index out of range");
    if (t->kind == Kind::Sym) {
      if (k >= t->s().size()) raise(Err::Index, "string index out of range");
      return owner_.sym(t->s().substr(k, 1));
    }
    raise(Err::Type, std::string("'") + type_name(t) + "' object is not subscriptable");
  }
  static const char* type_name(N t) {
    switch (t->kind) {
      case Kind::Sym: return "str";
      case Kind::Int: return "int";
      case Kind::Float: return "float";
      case Kind::Bool: return "bool";
      default: return "list";
    }
  }
  static N vat(const Ns& v, size_t k) {
    if (k >= v.size()) raise(Err::Index, "list index out of range");
    return v[k];
  }
  static Ns tail(N t, size_t from = 1) {
    if (from >= t->items.size()) return {};
    return Ns(t->items.begin() + from, t->items.end());
  }
  // head t[0] equals the symbol s (t a non-empty list, else IndexError for an empty one)
  bool head_is(N t, Head h) { return is(at(t, 0), h); }

  // Python's == between two trees (numbers by value, 1 == 1.0 == True; lists item by item)
  bool eq(N a, N b) const {
    if (a == b) return true;
    bool an = a->kind == Kind::Int || a->kind == Kind::Float || a->kind == Kind::Bool;
    bool bn = b->kind == Kind::Int || b->kind == Kind::Float || b->kind == Kind::Bool;
    if (an && bn) {
      if (a->kind == Kind::Float || b->kind == Kind::Float) {
        N fl = a->kind == Kind::Float ? a : b;
        N ot = fl == a ? b : a;
        if (ot->kind == Kind::Float) return a->f == b->f;
        int64_t iv = ot->kind == Kind::Bool ? int64_t(ot->b) : ot->i;
        double f = fl->f;
        if (!std::isfinite(f) || f != std::floor(f) || std::fabs(f) >= 9.2e18) return false;
        return static_cast<int64_t>(f) == iv;
      }
      int64_t x = a->kind == Kind::Bool ? int64_t(a->b) : a->i;
      int64_t y = b->kind == Kind::Bool ? int64_t(b->b) : b->i;
      return x == y;
    }
    if (a->kind != b->kind) return false;
    if (a->kind == Kind::Sym) return false;  // (one Node per name: a != b)
    if (a->kind != Kind::List || a->items.size() != b->items.size()) return false;
    guard();
    for (size_t k = 0; k < a->items.size(); ++k)
      if (!eq(a->items[k], b->items[k])) return false;
    return true;
  }
  // Python's truth of a tree (an empty list, a zero, an empty name, False are false)
  static bool truthy(N t) {
    switch (t->kind) {
      case Kind::List: return !t->items.empty();
      case Kind::Sym: return !t->s().empty();
      case Kind::Bool: return t->b;
      case Kind::Int: return t->i != 0;
      default: return t->f != 0.0;
    }
  }
  // Python's ``x in frozenset_or_dict`` for a head: a list is unhashable
  static void hashable(N t) {
    if (L(t)) raise(Err::Type, "unhashable type: 'list'");
  }

  bool in_P(N t) const { return t->kind == Kind::Sym && (t->i & kParamName); }
  bool is_mark(N t) const { return t->kind == Kind::Sym && (t->i & kMark); }
  // a simplified argument that is one fitted number (Python's _pl)
  bool pl(N a) const { return num(a) || is_mark(a) || in_P(a); }
  // ... with a parameter in it (Python's _fitted)
  bool fitted(N a) const { return is_mark(a) || in_P(a); }
  bool has_param(N t) const {
    if (L(t)) {
      guard();
      for (N x : t->items)
        if (has_param(x)) return true;
      return false;
    }
    return is_mark(t) || in_P(t);
  }
  bool has_param(const Ns& v) const {
    for (N x : v)
      if (has_param(x)) return true;
    return false;
  }

  N mk(const Ns& items) { return owner_.list(items.data(), items.size()); }
  // The list of ``head`` (when not null) and then ``items``: ``like`` itself when it holds
  // these very items (a rule that changes nothing hands back its input, not a new list of the
  // same content whose Facts would be looked up again: the memo hands back one Node per content
  // either way), else a new one. (apply's (head args...) listed only where the node is made)
  N remade(N like, N head, const Ns& items) {
    size_t m = items.size() + (head != nullptr);
    if (like && like->items.size() == m && (!head || like->items[0] == head) &&
        std::equal(items.begin(), items.end(), like->items.begin() + (m - items.size())))
      return like;
    if (!head) return mk(items);
    Ns all{head};
    all.insert(all.end(), items.begin(), items.end());
    return mk(all);
  }
  N remade(N like, const Ns& items) { return remade(like, nullptr, items); }
  N mk(Head head, Ns rest) {
    rest.insert(rest.begin(), owner_.head(head));
    return owner_.list(rest.data(), rest.size());
  }
  N F(double v) { return owner_.real(v); }
  N P() { return owner_.param_; }

  // -- folding --------------------------------------------------------------------------------

  static Num as_num(N a) {
    return a->kind == Kind::Int ? Num{true, a->i, 0.0} : Num{false, 0, a->f};
  }
  static bool fits(__int128 v) { return v > -(__int128(1) << 100) && v < (__int128(1) << 100); }
  static Num times(Num a, Num b) {
    if (a.is_int && b.is_int) {
      // (an exact product while it stays small; beyond, the float product)
      if (fits(a.i) && fits(b.i)) {
        __int128 hi = a.i * b.i;
        if ((a.i == 0 || hi / a.i == b.i) && fits(hi)) return Num{true, hi, 0.0};
      }
      return Num{false, 0, a.as_float() * b.as_float()};
    }
    return Num{false, 0, a.as_float() * b.as_float()};
  }
  static Num prod(const Ns& xs, size_t from = 0) {
    Num acc{true, 1, 0.0};
    for (size_t k = from; k < xs.size(); ++k) acc = times(acc, as_num(xs[k]));
    return acc;
  }
  static std::optional<double> fsum_of(const Ns& xs, size_t from = 0) {
    SmallVec<double, 8> v, partials;  // (no allocation for a sum of a few)
    for (size_t k = from; k < xs.size(); ++k) v.push_back(val(xs[k]));
    partials.reserve(v.size());
    return fsum(v.data(), v.size(), partials.data());
  }

  // The value of (head args...) over numbers, or nullopt when it is not a finite number.
  std::optional<double> fold(Head head, const Ns& args) {
    double v;
    if (head == kPlus) {
      auto s = fsum_of(args);
      if (!s) return std::nullopt;
      v = *s;
    } else if (head == kTimes) {
      v = prod(args).as_float();
    } else if (head == kMinus) {
      if (args.empty()) raise(Err::Index, "list index out of range");
      if (args.size() == 1) {
        v = -val(args[0]);
      } else {
        auto s = fsum_of(args, 1);
        if (!s) return std::nullopt;
        v = val(args[0]) - *s;
      }
    } else if (head == kDivide) {
      if (args.empty()) raise(Err::Index, "list index out of range");
      if (args.size() == 1) {
        if (val(args[0]) == 0.0) return std::nullopt;
        v = 1.0 / val(args[0]);
      } else {
        Num d = prod(args, 1);
        double dv = d.as_float();
        if (d.is_int ? d.i == 0 : dv == 0.0) return std::nullopt;
        v = val(args[0]) / dv;
      }
    } else if (folded(head) && (args.size() == 1 || args.size() == 2)) {
      bool binary = head == kPow || head == kExpt;
      if (binary != (args.size() == 2)) return std::nullopt;  // (a TypeError in Python)
      if (binary) {
        v = std::pow(val(args[0]), val(args[1]));
      } else if (head == kSquare) {
        Num x = as_num(args[0]);
        v = times(x, x).as_float();
      } else {  // (Python's math raised where these give a non-finite value)
        v = unary_function(head, val(args[0]));
      }
    } else {
      return std::nullopt;
    }
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  }

  // -- per-subtree facts ----------------------------------------------------------------------

  [[gnu::always_inline]] Facts* facts(N t) { return t->facts ? t->facts : new_facts(t); }

  // facts(t) of a list whose Facts are not known yet
  [[gnu::noinline]] Facts* new_facts(N t) {
    guard();
    // one list content, one Facts: found by a hash of its items (a list item by its own Facts,
    // a symbol by its Node, the one of its name), then compared item by item
    // (each item folded in by a multiply, the whole finalized once: the table's slot is the
    // hash's low bits; equal hashes only share a chain, the contents are compared)
    uint64_t h = 0x243f6a8885a308d3ULL ^ t->items.size();
    for (N x : t->items) {
      h = (h ^ item_word(x)) * 0x9e3779b97f4a7c15ULL;
      h ^= h >> 29;
    }
    Facts*& head = owner_.content_slot(splitmix64_finalize(h));
    for (Facts* f = head; f; f = f->same_hash)
      if (same_content(t->items, f->items)) return known(t, f);
    Facts* f = owner_.facts_.make();
    f->id = owner_.next_id_++;
    f->items = t->items;
    f->same_hash = head;
    head = f;
    return known(t, f);
  }

  // f, now list t's Facts (and its content number in t's Node: Node::i)
  static Facts* known(N t, Facts* f) {
    t->facts = f;
    t->i = static_cast<int64_t>(f->id);
    return f;
  }

  static uint64_t tagged(uint64_t v, uint64_t kind) {  // (every bit kept, the kind in the low)
    return ((v << 3) | (v >> 61)) ^ kind;
  }

  // an item's word in its list's content hash
  // (a list's and a symbol's, most items, tested first: a jump through the switch's table for
  // each item was a fifth of a content's lookup)
  [[gnu::always_inline]] uint64_t item_word(N x) {
    if (x->kind == Kind::List)
      return tagged(x->facts ? static_cast<uint64_t>(x->i) : new_facts(x)->id, 1);
    if (x->kind == Kind::Sym) return tagged(reinterpret_cast<uintptr_t>(x), 2);
    switch (x->kind) {
      case Kind::List:
      case Kind::Sym: break;
      case Kind::Int: return tagged(static_cast<uint64_t>(x->i), 3);
      case Kind::Float: return tagged(float_bits(x->f), 4);
      case Kind::Bool: return x->b ? 5 : 6;
    }
    return 0;
  }

  static uint64_t float_bits(double f) {  // (every NaN one content)
    uint64_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return std::isnan(f) ? 0x7ff8000000000000ULL : bits;
  }

  // do two lists whose items' Facts are known have the same content (their items given)?
  static bool same_content(const Items& a, const Items& b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      N x = a[k], y = b[k];
      if (x == y) continue;
      if (x->kind != y->kind) return false;
      switch (x->kind) {
        case Kind::List: if (x->facts != y->facts) return false; break;
        case Kind::Sym: return false;  // (one Node per name)
        case Kind::Int: if (x->i != y->i) return false; break;
        case Kind::Float: if (float_bits(x->f) != float_bits(y->f)) return false; break;
        case Kind::Bool: if (x->b != y->b) return false; break;
      }
    }
    return true;
  }

  // An atom's source text (a number's written once; a non-finite literal cannot be written).
  // (a name or a text written before read in place; the rest, written once per Node, not: the
  // texts of a canonical form's every atom are asked)
  [[gnu::always_inline]] std::string_view atom_text(N a) {
    if (a->kind == Kind::Sym) return a->s();
    if (a->text) return *a->text;  // (a list's is never set)
    return new_atom_text(a);
  }
  [[gnu::noinline]] std::string_view new_atom_text(N a) {
    if (a->kind == Kind::List) raise(Err::Type, "a list is not an atom");
    if (a->kind == Kind::Float && !std::isfinite(a->f))
      raise(Err::Value, "cannot write the literal " + nonfinite_repr(a->f));
    std::string& out = owner_.texts_.make()->s;
    if (a->kind == Kind::Bool)
      out = a->b ? "#t" : "#f";
    else if (a->kind == Kind::Int)
      out = std::to_string(a->i);
    else
      out = float_repr(a->f);
    a->text = &out;
    return out;
  }

  // A text memoized per list content in ``field`` (stored()): "(" + its items' texts + ")", an
  // atom's written by ``atom``.
  template <class Atom>
  std::string_view text(N t, const char* Facts::*field, Atom atom) {
    if (!L(t)) return atom(t);
    Facts* f = facts(t);
    if (!(f->*field)) {
      guard();
      // (the items' texts found once, an atom's here; its length counted from them, then
      // written in place, after its length, into the Simplifier's Arena of texts)
      SmallVec<std::string_view, 8> parts;
      size_t length = t->items.empty() ? 2 : t->items.size() + 1;
      for (N x : t->items) {
        std::string_view part = L(x) ? text(x, field, atom) : atom(x);
        parts.push_back(part);
        length += part.size();
      }
      if (length > UINT32_MAX) throw std::bad_alloc();
      auto n = static_cast<uint32_t>(length);
      auto* out = static_cast<char*>(owner_.stored_texts_.alloc(sizeof n + length));
      std::memcpy(out, &n, sizeof n);
      char* to = out + sizeof n;
      *to++ = '(';
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k) *to++ = ' ';
        put_text(to, parts[k]);
        to += parts[k].size();
      }
      *to = ')';
      f->*field = out;
    }
    return stored(f->*field);
  }

  // A count memoized per list content in ``field``: the sum of its items' counts, an atom's
  // given by ``atom``.
  template <class Atom>
  int64_t count(N t, int64_t Facts::*field, Atom atom) {
    if (!L(t)) return atom(t);
    Facts* f = facts(t);
    if (f->*field < 0) {
      guard();
      int64_t n = 0;
      for (N x : t->items) n += L(x) ? count(x, field, atom) : atom(x);  // (an atom's here)
      f->*field = n;
    }
    return f->*field;
  }

  // sexpr.to_source(t)
  std::string_view src(N t) {
    return text(t, &Facts::src, [this](N a) { return atom_text(a); });
  }

  // sexpr.skeleton(t, params): parameters written P and numbers C
  std::string_view skeleton(N t) {
    return text(t, &Facts::skel, [this](N a) { return skeleton_atom(a); });
  }
  std::string_view skeleton_atom(N a) {
    if (num(a)) return "C";
    return in_P(a) ? "P" : atom_text(a);
  }

  // Ordering of + and * arguments: variables before parameters, by parameter-free shape. A
  // boolean is not a str: Python's join (and comparison) of it was a TypeError.
  std::string_view key(N t) {
    return text(t, &Facts::key, [this](N a) -> std::string_view {
      if (num(a) || is_mark(a) || in_P(a)) return "C";
      if (a->kind != Kind::Sym)
        raise(Err::Type, "sequence item: expected str instance, bool found");
      return a->s();
    });
  }

  // sexpr.size(t): the number of atoms
  int64_t size(N t) { return count(t, &Facts::size, [](N) { return int64_t(1); }); }
  // how many parameters (named or still to be named) the tree mentions
  int64_t occurrences(N t) {
    return count(t, &Facts::occ, [this](N a) { return int64_t(is_mark(a) || in_P(a)); });
  }
  // how many parameters still to be named the tree holds
  int64_t marks(N t) {
    return count(t, &Facts::marks, [this](N a) { return int64_t(is_mark(a)); });
  }

  // the distinct parameter names t mentions, added to out (a name's one Node each)
  void named(N t, SmallVec<N, 8>& out) {
    if (!L(t)) {
      if (in_P(t) && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
      return;
    }
    guard();
    for (N x : t->items) named(x, out);
  }

  // -- simplification -------------------------------------------------------------------------

  // rule(t) memoized per list content in field
  N memo(N t, N Facts::*field, N (Rules::*rule)(N)) {
    Facts* f = facts(t);
    if (!(f->*field)) {
      guard();
      N out = (this->*rule)(t);
      f->*field = out;
    }
    return f->*field;
  }

  N simp(N t) { return !L(t) || t->items.empty() ? t : memo(t, &Facts::simp, &Rules::simp_node); }

  static bool pair(N b) { return L(b) && b->items.size() == 2; }

  bool mentions(N t, N name) const {
    if (L(t)) {
      guard();
      for (N x : t->items)
        if (mentions(x, name)) return true;
      return false;
    }
    return eq(t, name);
  }

  N substitute(N t, N name, N value) {
    if (L(t)) {
      guard();
      Ns out;
      out.reserve(t->items.size());
      for (N x : t->items) out.push_back(substitute(x, name, value));
      return mk(std::move(out));
    }
    return eq(t, name) ? value : t;
  }

  // How often name occurs in t; many when t binds names (no inlining there).
  int64_t uses(N t, N name) {
    if (L(t)) {
      if (!t->items.empty()) {
        N h = t->items[0];
        hashable(h);
        if (special(h->head)) return 2;
      }
      guard();
      int64_t n = 0;
      for (N x : t->items) n += uses(x, name);
      return n;
    }
    return eq(t, name) ? 1 : 0;
  }

  bool is_let(N t) {
    N head = t->items[0];
    return (is(head, kLet) || is(head, kLetStar)) && t->items.size() >= 3 && L(t->items[1]);
  }
  bool is_loop(N t) {
    return is(t->items[0], kLoop) && t->items.size() >= 3 && L(t->items[1]);
  }
  static bool arith_head(N head) { return arithmetic(head->head); }

  N simp_node(N t) {
    N head = t->items[0];
    if (is_let(t)) {
      bool star = is(head, kLetStar);
      Ns binds;
      for (N b : t->items[1]->items)
        binds.push_back(pair(b) ? mk({b->items[0], simp(b->items[1])}) : b);
      Ns body;
      for (size_t k = 2; k < t->items.size(); ++k) body.push_back(simp(t->items[k]));
      std::vector<size_t> used;  // indices into binds
      for (size_t k = 0; k < binds.size(); ++k) {
        N b = binds[k];
        bool keep = !pair(b);
        for (size_t j = 0; !keep && j < body.size(); ++j) keep = mentions(body[j], b->items[0]);
        if (!keep && star) {
          for (size_t j = 0; !keep && j < binds.size(); ++j)
            if (j != k) keep = mentions(at(binds[j], 1), b->items[0]);
        }
        if (keep) used.push_back(k);
      }
      if (used.empty() && body.size() == 1) return body[0];
      std::vector<size_t> consts;
      if (!star)
        for (size_t k : used)
          if (pair(binds[k]) && pl(binds[k]->items[1])) consts.push_back(k);
      if (!consts.empty() && body.size() == 1) {  // a binding to one fitted number is that number
        N out = body[0];
        for (size_t k : consts) out = substitute(out, binds[k]->items[0], binds[k]->items[1]);
        Ns rest;
        for (size_t k : used)
          if (std::find(consts.begin(), consts.end(), k) == consts.end()) rest.push_back(binds[k]);
        return simp(rest.empty() ? out : mk({head, mk(rest), out}));
      }
      if (!star && used.size() == 1 && body.size() == 1 &&
          uses(body[0], at(binds[used[0]], 0)) == 1) {  // a single use: inline
        N b = binds[used[0]];
        return simp(substitute(body[0], at(b, 0), at(b, 1)));
      }
      Ns kept;
      for (size_t k : used) kept.push_back(binds[k]);
      Ns out{head, mk(kept)};
      out.insert(out.end(), body.begin(), body.end());
      return mk(std::move(out));
    }
    if (is_loop(t)) return loop_form(t, false);
    if (!arith_head(head)) return t;  // comparisons, data operations, other forms: as written
    Ns args;
    for (size_t k = 1; k < t->items.size(); ++k) args.push_back(simp(t->items[k]));
    return apply(head->head, args, t);
  }

  static bool counter_step(N a) {
    return L(a) && a->items.size() == 3 && is(a->items[0], kPlus) && is_str(a->items[1]) &&
           num(a->items[2]);
  }

  N rule(N t, bool lifting) { return lifting ? lift(t) : simp(t); }

  // A loop with simp (or lift) on its state's initial values (a literal one stays) and body.
  // (each list the rule leaves as it was handed back, not made again: see remade)
  N loop_form(N t, bool lifting) {
    Ns binds;
    for (N b : t->items[1]->items)
      binds.push_back(pair(b) ? remade(b, {b->items[0], num(b->items[1])
                                                            ? b->items[1]
                                                            : rule(b->items[1], lifting)})
                              : b);
    Ns out{t->items[0], remade(t->items[1], binds)};
    for (size_t k = 2; k < t->items.size(); ++k) out.push_back(loop_body(t->items[k], lifting));
    return remade(t, out);
  }

  // Inside a loop's (if (= k N) s (recur update (+ k 1))): simp (or lift) on the state updates
  // and the result, never on the counter's step or the test.
  N loop_body(N t, bool lifting) {
    guard();
    if (L(t) && !t->items.empty() && is(t->items[0], kIf) && t->items.size() == 4)
      return remade(t, {t->items[0], t->items[1], loop_body(t->items[2], lifting),
                        loop_body(t->items[3], lifting)});
    if (L(t) && !t->items.empty() && is(t->items[0], kRecur)) {
      Ns out{t->items[0]};
      for (size_t k = 1; k < t->items.size(); ++k) {
        N a = t->items[k];
        out.push_back(counter_step(a) ? a : rule(a, lifting));
      }
      return remade(t, out);
    }
    return rule(t, lifting);
  }

  // (head args...) rewritten; ``like``: the list it was simplified from, if any (the node made
  // of head and args when it holds them, see remade)
  N apply(Head head, const Ns& args, N like = nullptr) {
    guard();
    bool all_num = true;
    for (N a : args) all_num = all_num && num(a);
    if (all_num) {
      auto v = fold(head, args);
      if (v) return F(*v);
    }
    // (the node of head and args, remade(like, h, args), is made only where it is handed back
    // or read: a sum, product, difference or quotient is rewritten into another list most
    // often; nor are its items listed before: most calls never read them)
    N h = owner_.head(head);
    bool all_pl = true;
    for (N a : args) all_pl = all_pl && pl(a);
    // a parameter-only subtree is one number
    if (all_pl && (has_param(h) || has_param(args))) return P();
    N out;
    if ((head == kPow || head == kExpt) && args.size() == 2 && num(args[1]) &&
        (val(args[1]) == 1 || val(args[1]) == 0))  // u^1 = u, u^0 = 1 (IEEE pow: for every u)
      return val(args[1]) == 1 ? args[0] : F(1.0);
    if (head == kPlus || head == kTimes) {
      out = assoc(head, args);
    } else if (head == kMinus) {
      out = minus(args);
    } else if (head == kDivide) {
      out = divide(args);
    } else if (args.size() == 1 && L(args[0]) && args[0]->items.size() == 2 &&
               ((head == kLog && is(args[0]->items[0], kExp)) ||
                (head == kExp && is(args[0]->items[0], kLog)) ||
                (head == kSquare && is(args[0]->items[0], kSqrt)))) {
      return args[0]->items[1];
    } else {
      N oc = outer_constant(head, args);
      if (!oc || !truthy(oc)) return remade(like, h, args);
      out = oc;
    }
    // never larger: a rewrite that would grow the tree leaves the node as it is (the node's
    // size, its head's atom and its arguments', counted without the Facts of a node that the
    // rewrite most often drops; the rules above never hand back that node itself: each makes
    // its own lists)
    int64_t node_size = 1;
    for (N a : args) node_size += size(a);
    return size(out) <= node_size ? out : remade(like, h, args);
  }

  bool is_pow(N u) { return is(at(u, 0), kPow) || is(at(u, 0), kExpt); }

  // A fitted constant inside a function that can stand outside it (see the Python module's
  // _outer_constant docstring for the list); nullptr when none applies.
  N outer_constant(Head head, const Ns& args) {
    N u = vat(args, 0);
    Ns extra;
    if (head == kExp && args.size() == 1) {
      if (fitted_difference(u)) return divide({P(), apply(kExp, {at(u, 2)})});
      Split s = split_sum(u);
      if (s.c) return apply(kTimes, {P(), apply(kExp, {s.rest})});
      return nullptr;
    }
    if (head == kLog && args.size() == 1) {
      if (L(u) && is_pow(u) && fitted(at(u, 2)))
        return apply(kTimes, {P(), apply(kLog, {at(u, 1)})});  // log(w^c)
      if (L(u) && is_pow(u) && fitted(at(u, 1))) return apply(kTimes, {P(), at(u, 2)});
      if (L(u) && head_is(u, kDivide) && num(at(u, 1)) && num_eq(at(u, 1), 1))
        return minus({apply(kLog, {at(u, 2)})});  // log(1/w) = -log(w)
      if (slotted(u) && !fitted(u)) {
        N rest = unscaled(u);
        if (reciprocal(rest)) return minus({P(), apply(kLog, {at(rest, 2)})});
        return apply(kPlus, {P(), apply(kLog, {rest})});
      }
      return nullptr;
    }
    if ((head == kSquare || head == kSqrt) && args.size() == 1) {
      if (L(u) && is_pow(u) && fitted(at(u, 2))) return mk({at(u, 0), at(u, 1), P()});
    } else if ((head == kPow || head == kExpt) && args.size() == 2) {
      N k = args[1];
      if (fitted(u)) {
        Split s = split_sum(k);  // c^(d + w) = c^d c^w
        if (s.c) return apply(kTimes, {P(), apply(head, {u, s.rest})});
        if (slotted(k) && !fitted(k)) return mk({owner_.head(head), u, unscaled(k)});
        return nullptr;
      }
      if (L(u) && head_is(u, kExp))  // exp(w)^k = exp(k w)
        return apply(kExp, {apply(kTimes, {k, at(u, 1)})});
      if (L(u) && is_pow(u) && (slotted(at(u, 2)) || fitted(at(u, 1))))
        return apply(head, {at(u, 1), apply(kTimes, {at(u, 2), k})});
      if (!pl(k)) return nullptr;
      extra.push_back(k);
    } else {
      return nullptr;
    }
    if (slotted(u) && !fitted(u)) {  // f(c w) = c' f(w), f(c / w) = c' / f(w)
      N rest = unscaled(u);
      if (reciprocal(rest)) {
        Ns a{at(rest, 2)};
        a.insert(a.end(), extra.begin(), extra.end());
        return divide({P(), apply(head, a)});
      }
      Ns a{rest};
      a.insert(a.end(), extra.begin(), extra.end());
      return apply(kTimes, {P(), apply(head, a)});
    }
    return nullptr;
  }

  // The terms of a sum or difference, flattened: (- (+ u v) w) -> u, v, (- w).
  Ns terms(N t) {
    guard();
    if (L(t) && !t->items.empty() && is(t->items[0], kPlus)) {
      Ns out;
      for (size_t k = 1; k < t->items.size(); ++k) {
        Ns sub = terms(t->items[k]);
        out.insert(out.end(), sub.begin(), sub.end());
      }
      return out;
    }
    if (L(t) && t->items.size() == 3 && is(t->items[0], kMinus)) {
      Ns out = terms(t->items[1]);
      Ns sub = terms(minus({t->items[2]}));
      out.insert(out.end(), sub.begin(), sub.end());
      return out;
    }
    return {t};
  }

  // (group, rest) when function call t has a fitted constant that can stand outside it.
  std::pair<char, N> pulled(N t) {
    if (!(L(t) && !t->items.empty())) return {0, nullptr};
    N h = t->items[0];
    hashable(h);
    if (!folded(h->head)) return {0, nullptr};
    Facts* f = facts(t);
    if (!f->pull_known) {
      f->pull_known = true;  // (None, None) while it is being found
      N out = outer_constant(h->head, tail(t));
      if (out && L(out) && (head_is(out, kTimes) || head_is(out, kDivide) || head_is(out, kPlus) ||
                            head_is(out, kMinus)) &&
          out->items.size() == 3 && fitted(out->items[1])) {
        if (is(out->items[0], kDivide)) {
          N r = divide({F(1.0), out->items[2]});
          f->pull_group = '*';
          f->pull_rest = r;
        } else if (is(out->items[0], kMinus)) {
          N r = minus({out->items[2]});
          f->pull_group = '+';
          f->pull_rest = r;
        } else {
          f->pull_group = out->items[0]->s()[0];
          f->pull_rest = out->items[2];
        }
      }
    }
    return {f->pull_group, f->pull_rest};
  }

  // (c, rest) when t is a head group with exactly one fitted constant c among its arguments.
  Split split(N t, Head head) {
    if (!(L(t) && !t->items.empty() && is(t->items[0], head))) return {};
    Ns consts;
    for (size_t k = 1; k < t->items.size(); ++k)
      if (fitted(t->items[k])) consts.push_back(t->items[k]);
    if (consts.size() != 1) return {};
    Ns rest;
    for (size_t k = 1; k < t->items.size(); ++k)
      if (t->items[k] != consts[0]) rest.push_back(t->items[k]);
    return {consts[0], rest.size() == 1 ? rest[0] : apply(head, rest)};
  }

  N assoc(Head head, const Ns& args) {
    bool plus = head == kPlus;
    Ns flat;
    for (N a : args) {
      if (L(a) && !a->items.empty() && is(a->items[0], head)) {
        flat.insert(flat.end(), a->items.begin() + 1, a->items.end());
      } else if (plus && L(a) && a->items.size() == 3 && is(a->items[0], kMinus)) {
        Ns sub = terms(a);  // u - v is u + (-v)
        flat.insert(flat.end(), sub.begin(), sub.end());
      } else {
        flat.push_back(a);
      }
    }
    if (!plus)
      for (N a : flat)
        if (num_eq(a, 0)) return F(0.0);
    Ns rest = fold_constants(head, flat);
    if (plus)  // (the groupings may leave constants to fold again)
      rest = fold_constants(head, like_terms(distribute(affine_terms(std::move(rest)))));
    else
      rest = scale_into_ratio(fold_constants(head, merge_scales(std::move(rest))));
    if (rest.empty()) return F(plus ? 0.0 : 1.0);
    if (rest.size() == 1) return rest[0];
    sort_args(rest);
    if (plus && rest.size() == 2 && pl(rest[0]) && L(rest[1]) && rest[1]->items.size() == 2 &&
        is(rest[1]->items[0], kMinus))
      return mk({owner_.head(kMinus), rest[0], rest[1]->items[1]});  // c + (-w) is c - w
    Ns out{owner_.head(head)};
    out.insert(out.end(), rest.begin(), rest.end());
    return mk(std::move(out));
  }

  // rest put in the order sorted(rest, key=lambda a: (not pl(a), key(a))) gives (stable), in
  // place (a new list of them, moved into rest's place, was a third of the sort's instructions)
  void sort_args(Ns& rest) {
    struct Keyed {  // (its key's bytes and their count: the few on the stack left unset)
      bool variable;
      const char* key;
      size_t n;
      N item;
    };
    auto first = [](const Keyed& k) {  // (an empty key's 0, below every other)
      return k.n ? static_cast<unsigned char>(k.key[0]) : 0;
    };
    auto less = [&first](const Keyed& a, const Keyed& b) {
      if (a.variable != b.variable) return a.variable < b.variable;
      // (most keys differ in their first byte, compared here as the views compare bytes:
      // unsigned)
      auto x = first(a), y = first(b);
      if (x != y) return x < y;
      return std::string_view(a.key, a.n) < std::string_view(b.key, b.n);
    };
    // (the few arguments of a sum or product sorted on the stack, by insertion: stable, as
    // stable_sort, which allocates a buffer each call)
    constexpr size_t kFew = 16;
    size_t n = rest.size();
    Keyed few[kFew];
    std::vector<Keyed> many;
    Keyed* keyed = few;
    if (n > kFew) {
      many.resize(n);
      keyed = many.data();
    }
    for (size_t k = 0; k < n; ++k) {
      std::string_view k_text = key(rest[k]);
      keyed[k] = Keyed{!pl(rest[k]), k_text.data(), k_text.size(), rest[k]};
    }
    if (n > kFew) {
      std::stable_sort(keyed, keyed + n, less);
    } else {
      for (size_t i = 1; i < n; ++i) {
        Keyed x = keyed[i];
        size_t j = i;
        for (; j > 0 && less(x, keyed[j - 1]); --j) keyed[j] = keyed[j - 1];
        keyed[j] = x;
      }
    }
    for (size_t k = 0; k < n; ++k) rest[k] = keyed[k].item;
  }

  // A sum's or product's arguments with its constants folded into one.
  Ns fold_constants(Head head, const Ns& items) {
    Ns consts, rest;
    for (N a : items) (pl(a) ? consts : rest).push_back(a);
    if (consts.size() == 1 && is_str(consts[0])) {
      rest.push_back(consts[0]);  // one parameter keeps its name (and any sharing)
    } else if (has_param(consts)) {
      rest.push_back(P());
    } else {
      double unit = head == kPlus ? 0.0 : 1.0;
      std::optional<double> v = consts.empty() ? std::optional<double>(unit) : fold(head, consts);
      if (!v)
        rest.insert(rest.end(), consts.begin(), consts.end());
      else if (*v != unit)
        rest.push_back(F(*v));
    }
    return rest;
  }

  // True when t has a free scale of its own.
  // (kept in the list's Facts when it has them: the rules ask it of the same lists again and
  // again; a list without them is not given them for it)
  bool slotted(N t) {
    if (fitted(t)) return true;
    if (!L(t) || t->items.empty()) return false;
    if (t->facts && t->facts->slotted >= 0) return t->facts->slotted;
    bool out = slotted_list(t);
    if (t->facts) t->facts->slotted = out;
    return out;
  }
  bool slotted_list(N t) {
    guard();
    N h = t->items[0];
    if (is(h, kTimes)) {
      for (size_t k = 1; k < t->items.size(); ++k)
        if (slotted(t->items[k])) return true;
      return false;
    }
    if (is(h, kDivide) && t->items.size() == 3) return slotted(t->items[1]) || slotted(t->items[2]);
    if (is(h, kPlus)) return scaled_sum(t);
    return pulled(t).first == '*';
  }

  // t (slotted) with its free scale fixed: c u -> u, (d + e u) -> (d + u).
  N unscaled(N t) {
    if (fitted(t)) return F(1.0);
    guard();
    if (head_is(t, kTimes)) {
      size_t best = 0;
      bool best_fitted = false;
      for (size_t k = 1; k < t->items.size(); ++k) {
        if (!slotted(t->items[k])) continue;
        bool fk = fitted(t->items[k]);
        if (best == 0 || (fk && !best_fitted)) {
          best = k;
          best_fitted = fk;
        }
      }
      if (best == 0) raise(Err::Value, "min() arg is an empty sequence");
      Ns a;
      for (size_t k = 1; k < t->items.size(); ++k)
        a.push_back(k != best ? t->items[k] : unscaled(t->items[k]));
      return apply(kTimes, a);
    }
    if (head_is(t, kDivide)) {
      if (slotted(at(t, 1))) return divide({unscaled(at(t, 1)), at(t, 2)});
      return divide({at(t, 1), unscaled(at(t, 2))});
    }
    if (!head_is(t, kPlus)) return pulled(t).second;
    size_t i = 0;
    for (size_t k = 1; k < t->items.size(); ++k)
      if (!fitted(t->items[k])) {
        i = k;
        break;
      }
    if (i == 0) raise(Err::StopIteration, "");
    Ns a;
    for (size_t k = 1; k < t->items.size(); ++k)
      a.push_back(k != i ? t->items[k] : unscaled(t->items[k]));
    return apply(kPlus, a);
  }

  bool scaled_sum(N t) {
    if (!(L(t) && t->items.size() > 2 && is(t->items[0], kPlus))) return false;
    for (size_t k = 1; k < t->items.size(); ++k)
      if (!slotted(t->items[k])) return false;
    return true;
  }

  static Ns factors_of(N t) {
    if (L(t) && !t->items.empty() && is(t->items[0], kTimes)) return tail(t);
    return {t};
  }

  // A ratio's denominator shares parameter-free factors with the rest of the product: they
  // cancel ((u / v) v -> u).
  Ns cancel(Ns factors) {
    guard();
    for (size_t i = 0; i < factors.size(); ++i) {
      N a = factors[i];
      if (L(a) && a->items.size() == 3 && is(a->items[0], kDivide)) {
        Ns o{owner_.head(kTimes)};
        for (size_t j = 0; j < factors.size(); ++j)
          if (j != i) o.push_back(factors[j]);
        N others = mk(std::move(o));
        Texts common = common_factors(others, a->items[2]);
        if (!common.empty()) {
          N rest = without(others, common);
          return cancel(
              {divide({apply(kTimes, {rest, a->items[1]}), without(a->items[2], common)})});
        }
      }
    }
    return factors;
  }

  // The parameter-free factors u and v share (by source, with multiplicity).
  using Texts = SmallVec<std::string_view, 8>;  // memoized sources, compared by content
  static std::string_view* find_text(Texts& v, std::string_view s) {
    return std::find_if(v.begin(), v.end(), [&](std::string_view x) { return x == s; });
  }

  Texts common_factors(N u, N v) {
    Texts vs, out;
    for (N f : factors_of(v))
      if (!occurrences(f)) vs.push_back(src(f));
    for (N f : factors_of(u)) {
      std::string_view s = src(f);
      if (!occurrences(f) && !num(f)) {
        auto it = find_text(vs, s);
        if (it != vs.end()) {
          vs.erase(it);
          out.push_back(s);
        }
      }
    }
    return out;
  }

  // Product t without one factor of each source in srcs.
  N without(N t, const Texts& srcs) {
    Texts left = srcs;
    Ns rest;
    for (N f : factors_of(t)) {
      std::string_view s = src(f);
      auto it = find_text(left, s);
      if (it != left.end())
        left.erase(it);
      else
        rest.push_back(f);
    }
    return rest.empty() ? F(1.0) : apply(kTimes, rest);
  }

  static N negand(N x) {
    if (L(x) && x->items.size() == 2 && is(x->items[0], kMinus)) return x->items[1];
    if (L(x) && x->items.size() == 3 && is(x->items[0], kMinus) && num_eq(x->items[1], 0))
      return x->items[2];
    return nullptr;
  }

  // One free scale per product (see the Python module's _merge_scales).
  Ns merge_scales(Ns given) {
    Ns factors = cancel(std::move(given));
    SmallVec<size_t, 8> carriers;
    for (size_t i = 0; i < factors.size(); ++i)
      if (slotted(factors[i])) carriers.push_back(i);
    if (carriers.empty()) return factors;
    for (N& a : factors) {
      N n = negand(a);
      if (n) a = n;
    }
    if (carriers.size() < 2) return factors;
    // a sum's or a ratio's own scale is kept rather than a constant factor; ties by shape
    size_t keep = carriers[0];
    int best_rank = 0;
    std::string_view best_key;
    for (size_t n = 0; n < carriers.size(); ++n) {
      size_t i = carriers[n];
      int rank = fitted(factors[i]) ? 2 : scaled_sum(factors[i]) ? 0 : 1;
      std::string_view k = key(factors[i]);
      if (n == 0 || rank < best_rank || (rank == best_rank && k < best_key)) {
        best_rank = rank;
        best_key = k;
        keep = i;
      }
    }
    Ns out;
    for (size_t i = 0; i < factors.size(); ++i) {
      bool carrier = std::find(carriers.begin(), carriers.end(), i) != carriers.end();
      if (!carrier || i == keep) {
        out.push_back(factors[i]);
      } else {
        N u = unscaled(factors[i]);
        if (!num_eq(u, 1)) out.push_back(u);
      }
    }
    return out;
  }

  using Base = Texts;
  // whether the n texts at a are base b's
  static bool same_base(const std::string_view* a, size_t n, const Base& b) {
    if (n != b.size()) return false;
    for (size_t k = 0; k < n; ++k)
      if (a[k] != b[k]) return false;
    return true;
  }
  static bool same_base(const Base& a, const Base& b) { return same_base(a.data(), a.size(), b); }
  template <class Bases>
  static bool has_base(const Bases& bases, const Base& b) {
    for (const Base& x : bases)
      if (same_base(x, b)) return true;
    return false;
  }
  // A sum's term without its fitted scale: (* c u v) -> (u v), u -> (u,), (- u) -> (u,).
  std::pair<Base, Ns> base(N term) {
    if (L(term) && term->items.size() == 2 && is(term->items[0], kMinus)) term = term->items[1];
    if (L(term) && !term->items.empty() && is(term->items[0], kTimes)) {
      Ns factors;
      for (size_t k = 1; k < term->items.size(); ++k)
        if (!pl(term->items[k])) factors.push_back(term->items[k]);
      if (static_cast<int64_t>(factors.size()) >= static_cast<int64_t>(term->items.size()) - 2) {
        Base b;
        for (N f : factors) b.push_back(src(f));
        return {b, factors};
      }
    }
    return {Base{src(term)}, Ns{term}};
  }

  // A product with a sum among its factors is expanded when one of its terms is like another
  // term of the sum around it.
  Ns distribute(Ns terms_in) {
    guard();
    for (size_t i = 0; i < terms_in.size(); ++i) {
      N t = terms_in[i];
      N s = nullptr;
      if (L(t) && !t->items.empty() && is(t->items[0], kTimes)) {
        Ns sums;
        for (size_t k = 1; k < t->items.size(); ++k) {
          N f = t->items[k];
          if (L(f) && !f->items.empty() && is(f->items[0], kPlus)) sums.push_back(f);
        }
        if (sums.size() == 1) s = sums[0];
      }
      if (!s) continue;
      Ns others;
      for (size_t k = 1; k < t->items.size(); ++k)
        if (t->items[k] != s) others.push_back(t->items[k]);
      Ns parts;
      for (size_t k = 1; k < s->items.size(); ++k) {
        Ns a = others;
        a.push_back(s->items[k]);
        parts.push_back(apply(kTimes, a));
      }
      std::vector<Base> bases;  // (a few: searched in order)
      bases.reserve(parts.size());
      for (N u : parts) bases.push_back(base(u).first);
      bool like = false;
      for (size_t j = 0; !like && j < terms_in.size(); ++j)
        if (j != i) like = has_base(bases, base(terms_in[j]).first);
      if (like) {
        Ns next(terms_in.begin(), terms_in.begin() + i);
        next.insert(next.end(), parts.begin(), parts.end());
        next.insert(next.end(), terms_in.begin() + i + 1, terms_in.end());
        return distribute(std::move(next));
      }
    }
    return terms_in;
  }

  // c (d + u) is c d + c u: in a sum with another constant the term's inner constant folds in.
  Ns affine_terms(Ns terms_in) {
    SmallVec<Split, 8> splits;
    for (N t : terms_in) {
      if (L(t) && head_is(t, kTimes)) {
        splits.push_back(split_sum(t));
      } else if (pulled(t).first == '+') {
        splits.push_back({P(), pulled(t).second});
      } else {
        splits.push_back({});
      }
    }
    int inner = 0;
    for (auto& s : splits) inner += s.c != nullptr;
    bool own = false;
    for (N t : terms_in) own = own || fitted(t);
    if (inner + int(own) < 2) return terms_in;
    Ns out;
    for (size_t k = 0; k < terms_in.size(); ++k)
      out.push_back(splits[k].c ? splits[k].rest : terms_in[k]);
    if (!own) out.push_back(P());
    return out;
  }

  bool fitted_difference(N t) {
    return L(t) && t->items.size() == 3 && is(t->items[0], kMinus) && fitted(t->items[1]);
  }
  static bool reciprocal(N t) {
    return L(t) && t->items.size() == 3 && is(t->items[0], kDivide) && num_eq(t->items[1], 1);
  }

  // (c, rest) when t is a sum with a fitted constant c, or (- c w), or a fitted scale times one.
  Split split_sum(N t) {
    guard();
    if (fitted_difference(t)) return {t->items[1], minus({t->items[2]})};
    if (L(t) && t->items.size() == 3 && is(t->items[0], kTimes) && fitted(t->items[1])) {
      Split s = split_sum(t->items[2]);
      if (!s.c) return {};
      return {P(), apply(kTimes, {t->items[1], s.rest})};
    }
    Split s = split(t, kPlus);
    if (!s.c && L(t) && head_is(t, kPlus)) {
      for (size_t i = 1; i < t->items.size(); ++i) {  // a term's own constant: d + c (e + u) + w
        N u = t->items[i];
        Split r = (L(u) && head_is(u, kTimes)) ? split_sum(u) : Split{};
        if (r.c) {
          Ns a;
          for (size_t j = 1; j < t->items.size(); ++j) a.push_back(j == i ? r.rest : t->items[j]);
          return {r.c, apply(kPlus, a)};
        }
      }
    }
    return s;
  }

  // c (k / v) w -> (c' / v) w: a product's fitted scale joins the constant numerator of a ratio.
  Ns scale_into_ratio(Ns factors) {
    N scale = nullptr, ratio = nullptr;
    for (N a : factors)
      if (pl(a)) {
        scale = a;
        break;
      }
    for (N a : factors)
      if (L(a) && a->items.size() == 3 && is(a->items[0], kDivide) && pl(a->items[1])) {
        ratio = a;
        break;
      }
    if (!scale || !ratio) return factors;
    N k = ratio->items[1];
    N merged;
    if (num(scale) && num(k)) {
      auto m = fold(kTimes, {scale, k});
      if (!m) return factors;
      merged = F(*m);
    } else if (num_eq(k, 1)) {
      merged = scale;  // (a keeps its name)
    } else if (num_eq(scale, 1)) {
      merged = k;
    } else {
      merged = P();
    }
    Ns out;
    for (N a : factors) {
      if (a == scale) continue;
      out.push_back(a == ratio ? mk({owner_.head(kDivide), merged, ratio->items[2]}) : a);
    }
    return out;
  }

  // c1*u + c2*u -> c*u (and u + c*u): like terms share one fitted scale.
  Ns like_terms(const Ns& terms_in) {
    // (a group and its key on the stack, no allocation for a sum of a few terms: a vector of
    // groups, each with its key's and factors' lists, was one each sum)
    struct Group {
      bool constant;  // a constant term, kept in its place (no key)
      bool repeated;
      uint32_t key, n;  // its key (base's Base): keys[key .. key + n)
      N first;
    };
    // the groups in order of their first term, each constant term in its place among them (a
    // sum's few terms: searched in order), and their keys end to end
    SmallVec<Group, 8> groups;
    SmallVec<std::string_view, 16> keys;
    for (N t : terms_in) {
      if (is_mark(t) || num(t)) {
        groups.push_back(Group{true, false, 0, 0, t});
        continue;
      }
      Base k = base(t).first;
      Group* like = nullptr;
      for (Group& g : groups)
        if (!g.constant && same_base(keys.data() + g.key, g.n, k)) {
          like = &g;
          break;
        }
      if (like) {
        like->repeated = true;
      } else {
        groups.push_back(Group{false, false, static_cast<uint32_t>(keys.size()),
                               static_cast<uint32_t>(k.size()), t});
        keys.insert(keys.end(), k.begin(), k.end());
      }
    }
    Ns out;
    for (const Group& g : groups) {
      if (!g.repeated) {  // (a constant, or a term like no other)
        out.push_back(g.first);
        continue;
      }
      // (its first term's factors found again: base is the same of the same term)
      Ns factors = base(g.first).second;
      Ns a{owner_.head(kTimes), P()};
      a.insert(a.end(), factors.begin(), factors.end());
      out.push_back(mk(std::move(a)));
    }
    return out;
  }

  N negate(N v) {
    if (v->kind == Kind::Int) {
      if (v->i == INT64_MIN) return F(-static_cast<double>(v->i));
      return owner_.integer(-v->i);
    }
    return F(-v->f);
  }

  N minus(const Ns& args) {
    guard();
    if (args.size() == 1) {
      N a = args[0];
      N inner = negand(a);
      if (inner) return inner;
      if (slotted(a)) return apply(kTimes, {P(), unscaled(a)});  // -(c u) is c' u
      Split s = split_sum(a);  // -(c + w) is c' - w
      if (s.c) return apply(kPlus, {P(), minus({s.rest})});
      return mk({owner_.head(kMinus), a});
    }
    if (args.size() != 2) return mk(kMinus, args);
    N u = args[0], v = args[1];
    if (eq(u, v) && !has_param(u)) return F(0.0);
    if (num_eq(v, 0)) return u;
    if (num_eq(u, 0)) {
      N inner = negand(v);
      return inner ? inner : mk({owner_.head(kMinus), F(0.0), v});
    }
    if (pl(v)) return assoc(kPlus, {u, has_param(v) ? P() : negate(v)});  // u - c is u + c'
    N inner = negand(v);
    if (inner) return apply(kPlus, {u, inner});  // u - (-w) is u + w
    Split s = split_sum(v);  // u - (c + w) is (u - w) + c'
    if (s.c) return apply(kPlus, {minus({u, s.rest}), P()});
    s = split_sum(u);  // (c + w) - v is c + (w - v)
    if (s.c) return apply(kPlus, {s.c, minus({s.rest, v})});
    if (L(v) && head_is(v, kPlus)) {  // u - (v + w) is u + (-v) + (-w)
      Ns a{u};
      for (size_t k = 1; k < v->items.size(); ++k) a.push_back(minus({v->items[k]}));
      return apply(kPlus, a);
    }
    if (L(u) && head_is(u, kPlus)) {  // (u + w) - v is u + w + (-v)
      Ns a = tail(u);
      a.push_back(minus({v}));
      return apply(kPlus, a);
    }
    bool like = slotted(v);
    if (!like) {
      Base bu = base(u).first;  // (u's first, as Python evaluated them)
      like = same_base(bu, base(v).first);
    }
    if (like)
      return apply(kPlus, {u, minus({v})});  // u - c w is u + c' w
    return mk({owner_.head(kMinus), u, v});
  }

  N divide(Ns args) {
    guard();
    if (args.size() > 2) args = {args[0], assoc(kTimes, Ns(args.begin() + 1, args.end()))};
    if (args.size() != 2) return mk(kDivide, args);
    N u = args[0], v = args[1];
    if (eq(u, v) && !has_param(u)) return F(1.0);
    if (num_eq(v, 1)) return u;
    if (num_eq(u, 0)) return F(0.0);
    if (pl(v) && has_param(v)) return assoc(kTimes, {u, P()});  // u / c is u * c'
    if (num(v) && val(v) != 0.0)  // u / k is u * (1/k): the literal joins u's other factors
      return assoc(kTimes, {u, F(1.0 / val(v))});
    if (L(v) && v->items.size() == 3 && is(v->items[0], kDivide) && num_eq(v->items[1], 1))
      return !num_eq(u, 1) ? assoc(kTimes, {u, v->items[2]}) : v->items[2];
    if (L(v) && v->items.size() == 3 && is(v->items[0], kDivide))  // u / (p / q) is u q / p
      return divide({apply(kTimes, {u, v->items[2]}), v->items[1]});
    if (L(u) && u->items.size() == 3 && is(u->items[0], kDivide))  // (p / q) / v is p / (q v)
      return divide({u->items[1], apply(kTimes, {u->items[2], v})});
    Texts common = common_factors(u, v);
    if (!common.empty()) return divide({without(u, common), without(v, common)});
    auto scaled_product = [&](N w) {
      if (!(L(w) && head_is(w, kTimes))) return false;
      for (size_t k = 1; k < w->items.size(); ++k)
        if (pl(w->items[k])) return true;
      return false;
    };
    if (slotted(u) && slotted(v) && !scaled_product(v))
      return divide({u, unscaled(v)});  // c u / (d + e w) is c' u / (d' + w)
    if (scaled_product(v)) {
      // u / (c w) is c' u / w: the denominator's fitted scale joins the numerator's
      Ns scale, rest;
      for (size_t k = 1; k < v->items.size(); ++k)
        (pl(v->items[k]) ? scale : rest).push_back(v->items[k]);
      N w = rest.size() == 1 ? rest[0] : mk(kTimes, rest);
      if (!has_param(scale)) {  // literals: u / (k w) is (1/k) u / w
        auto k = fold(kTimes, scale);
        if (!k || *k == 0.0) return mk({owner_.head(kDivide), u, v});
        return assoc(kTimes, {F(1.0 / *k), divide({u, w})});
      }
      bool scaled_u = fitted(u);
      if (!scaled_u && L(u) && head_is(u, kTimes))
        for (size_t k = 1; k < u->items.size(); ++k) scaled_u = scaled_u || fitted(u->items[k]);
      if (scaled_u) return divide({u, w});  // (a literal numerator stays fixed)
      return assoc(kTimes, {P(), divide({u, w})});
    }
    return mk({owner_.head(kDivide), u, v});
  }

  // -- canonical form -------------------------------------------------------------------------

  // Every numeric literal in an arithmetic position becomes a parameter (integer exponents of
  // pow/expt and loop control stay literal: they are structure, not constants).
  N lift(N t) {
    if (!L(t) || t->items.empty()) return num(t) ? P() : t;
    return memo(t, &Facts::lift, &Rules::lift_node);
  }

  N lift_node(N t) {
    N head = t->items[0];
    if (is_let(t)) {
      Ns binds;
      for (N b : t->items[1]->items)
        binds.push_back(pair(b) ? mk({b->items[0], lift(b->items[1])}) : b);
      Ns out{head, mk(binds)};
      for (size_t k = 2; k < t->items.size(); ++k) out.push_back(lift(t->items[k]));
      return mk(std::move(out));
    }
    if (is_loop(t)) return loop_form(t, true);
    if (!arith_head(head)) return t;
    bool power = is(head, kPow) || is(head, kExpt);
    Ns out{head};
    for (size_t i = 1; i < t->items.size(); ++i) {
      N a = t->items[i];
      if (power && i == 2 && num(a) && std::isfinite(val(a)) && val(a) == std::floor(val(a)))
        out.push_back(a);
      else if (is(head, kMinus) && i == 1 && t->items.size() == 3 && num_eq(a, 0))
        out.push_back(a);  // (- 0 u) is a negation, not a constant
      else
        out.push_back(lift(a));
    }
    return remade(t, out);
  }

  // Parameters named in order of occurrence: each occurrence its own name, or (shared) each
  // distinct parameter its own name. The source and skeleton are written once, left to right,
  // into the Simplifier's two buffers (a subtree without parameters copies its memoized texts).
  struct Renaming {
    bool shared;
    // (shared) a parameter's name (its one Node) -> its new name's index, in order met (a
    // model's few parameters: searched in order)
    SmallVec<std::pair<N, size_t>, 8> mapping;
    size_t next = 0;                        // the names taken
    TextBuffer &s, &sk;                     // the source and skeleton written so far
    int64_t atoms = 0;                      // the atoms met
  };

  // (Tree: the renamed tree made, else nullptr for a list; Texts: the source, skeleton and
  // size written. A child's canonical form writes its texts alone, and its tree is made, with
  // no texts, only when it is read: see Canonical)
  template <bool Tree, bool Texts>
  N rename(N x, Renaming& r) {
    if (!L(x)) return rename_atom<Texts>(x, r);
    if (!occurrences(x)) {
      if (Texts) {
        r.s.put(src(x));
        r.sk.put(skeleton(x));
        r.atoms += size(x);
      }
      return x;
    }
    guard();
    Ns items;
    if (Texts) {
      r.s.put('(');
      r.sk.put('(');
    }
    for (size_t k = 0; k < x->items.size(); ++k) {
      if (Texts && k) {
        r.s.put(' ');
        r.sk.put(' ');
      }
      N y = x->items[k];  // (an atom renamed here: most items are)
      N z = L(y) ? rename<Tree, Texts>(y, r) : rename_atom<Texts>(y, r);
      if (Tree) items.push_back(z);
    }
    if (Texts) {
      r.s.put(')');
      r.sk.put(')');
    }
    return Tree ? mk(std::move(items)) : nullptr;
  }

  // rename of an atom: a parameter's new name, any other atom itself (its text written once,
  // its skeleton's C for a number, else the same text)
  template <bool Texts>
  [[gnu::always_inline]] N rename_atom(N x, Renaming& r) {
    if (is_mark(x) || in_P(x)) {
      size_t k = name_index(x, r);
      if (Texts) {
        ++r.atoms;
        r.s.put(owner_.names_[k]);
        r.sk.put('P');
      }
      return owner_.name_node(k);
    }
    if (!Texts) return x;
    ++r.atoms;
    std::string_view text = atom_text(x);
    r.s.put(text);
    if (num(x))
      r.sk.put('C');
    else
      r.sk.put(text);
    return x;
  }

  // the index of the name parameter x takes: the next one, or (shared) a parameter name's own
  // once it has one; StopIteration when the names are all taken
  size_t name_index(N x, Renaming& r) {
    bool by_name = r.shared && !is_mark(x);
    if (by_name)
      for (const auto& [p, k] : r.mapping)
        if (p == x) return k;  // (one Node per name)
    if (r.next >= owner_.names_.size()) raise(Err::StopIteration, "");
    size_t k = r.next++;
    if (by_name) r.mapping.push_back({x, k});
    return k;
  }

  // c with t renamed: its source, skeleton (sexpr.skeleton of the renamed tree) and size
  // (sexpr.size of the tree renamed, and of the renamed tree: rename meets every atom), what
  // its tree is made from (canonical_tree), its tree too when ``tree`` (in the same pass), fits
  void renamed(N t, bool shared, Canonical& c, bool tree) {
    Renaming r{shared, {}, 0, owner_.rename_src_, owner_.rename_skel_, 0};
    r.s.clear();
    r.sk.clear();
    c.tree = tree ? rename<true, true>(t, r) : rename<false, true>(t, r);
    c.from = t;
    c.shared = shared;
    c.size = r.atoms;
    c.source = kept_text(r.s);
    c.skeleton = kept_text(r.sk);
    c.fits = true;
  }

  // The renamed tree of canonical form c: its own once made, else made now (renamed again,
  // no text written)
  N canonical_tree(const Canonical& c) {
    if (c.tree) return c.tree;
    Renaming r{c.shared, {}, 0, owner_.rename_src_, owner_.rename_skel_, 0};
    return rename<true, false>(c.from, r);
  }

  // &c, its tree made and kept in it when ``tree`` asks for it and it fits
  const Canonical* with_tree(Canonical& c, bool tree) {
    if (tree && c.fits && !c.tree) c.tree = canonical_tree(c);
    return &c;
  }

  // b's text copied into the Simplifier's Arena of canonical texts (until its next reset)
  TextView kept_text(const TextBuffer& b) {
    auto* out = static_cast<char*>(owner_.canonical_texts_.alloc(b.size()));
    std::memcpy(out, b.data(), b.size());
    return TextView{out, b.size()};
  }

  // The canonical form of tree, the Simplifier's record (fits false when the model needs more
  // parameters than there are names: the search meets such children often, and a C++
  // exception costs more than the rest of a small canonical form).
  // (``with``: its tree made too, see Simplifier::canonical_form)
  const Canonical* canonical_form(N tree, bool with) {
    int64_t n = static_cast<int64_t>(owner_.names_.size());
    N t = simp(tree);
    Facts* known = L(t) ? facts(t) : nullptr;  // (what follows reads t's content alone)
    if (known && known->canonical >= 0)
      return with_tree(owner_.canonicals_[known->canonical], with);
    Canonical c;
    Facts* lifted = canonical_of(t, n, c, with);
    if (lifted && lifted->renamed >= 0) {  // (renamed before: that record, not a copy of it)
      if (known) known->canonical = lifted->renamed;
      return with_tree(owner_.canonicals_[lifted->renamed], with);
    }
    if (!known && !lifted) {
      owner_.last_ = std::move(c);
      return &owner_.last_;
    }
    int64_t k = static_cast<int64_t>(owner_.canonicals_.size());
    if (known) known->canonical = k;
    if (lifted) lifted->renamed = k;
    owner_.canonicals_.push_back(std::move(c));
    return &owner_.canonicals_.back();
  }

  // canonical_form's steps after the first simplification, of t, into c (left as made when
  // the model does not fit). Gives the Facts of the lifted content when c is its renaming (a
  // list's), c left as made when that content was renamed before (Facts::renamed): another
  // content lifts to it; else nullptr.
  Facts* canonical_of(N t, int64_t n, Canonical& c, bool tree) {
    N lifted = simp(lift(t));
    for (int k = 0; k < 4; ++k) {  // until lifting and simplifying again changes nothing
      N again = simp(lift(lifted));
      if (again == lifted || src(again) == src(lifted)) break;  // (one Node: one content)
      lifted = again;
    }
    if (occurrences(lifted) <= n) {
      Facts* f = L(lifted) ? facts(lifted) : nullptr;
      if (!f || f->renamed < 0) renamed(lifted, false, c, tree);
      return f;
    }
    if (occurrences(t) <= n) {
      renamed(t, false, c, tree);
    } else {
      SmallVec<N, 8> names;
      named(t, names);
      if (static_cast<int64_t>(names.size()) + marks(t) <= n) renamed(t, true, c, tree);
    }
    return nullptr;
  }
};

// -- the Simplifier ---------------------------------------------------------------------------

// whether every byte of s is ASCII (below 0x80)
static bool all_ascii(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

Simplifier::Simplifier(std::vector<std::string> params) : names_(std::move(params)) {
  params_.insert(names_.begin(), names_.end());
  for (const auto& name : names_) ascii_ = ascii_ && all_ascii(name);
  contents_.assign(1 << 12, {0, nullptr});
  param_ = sym("?");
}

Node* Simplifier::sym(const std::string& name) {
  Node*& seen = recent_syms_[recent_slot(name)];
  if (seen && seen->s() == name) return seen;
  auto it = symbols_.find(name);
  if (it != symbols_.end()) return seen = it->second;
  Node* n = seen = make(Kind::Sym);
  n->name = &symbols_.emplace(name, n).first->first;  // (a map's keys never move)
  ascii_ = ascii_ && all_ascii(name);
  n->i = (params_.count(name) ? kParamName : 0) | (name == "?" ? kMark : 0);
  for (int h = kFirstArith; h < kHeads; ++h)
    if (name == kHeadNames[h]) n->head = static_cast<Head>(h);
  return n;
}
Node* Simplifier::integer(int64_t v) {
  Node* n = make(Kind::Int);
  n->i = v;
  return n;
}
Node* Simplifier::real(double v) {
  Node* n = make(Kind::Float);
  n->f = v;
  return n;
}
Node* Simplifier::boolean(bool v) {
  Node* n = make(Kind::Bool);
  n->b = v;
  return n;
}
Node* Simplifier::list(const std::vector<Node*>& items) { return list(items.data(), items.size()); }
Node* Simplifier::list(Node* const* items, size_t n) {
  if (n > UINT32_MAX) throw std::bad_alloc();
  auto** space = static_cast<Node**>(items_.alloc(n * sizeof(Node*)));
  switch (n) {  // (most lists are short: a call to memcpy for each was most of the copy)
    case 4: space[3] = items[3]; [[fallthrough]];
    case 3: space[2] = items[2]; [[fallthrough]];
    case 2: space[1] = items[1]; [[fallthrough]];
    case 1: space[0] = items[0]; [[fallthrough]];
    case 0: break;
    default: std::memcpy(space, items, n * sizeof(Node*));
  }
  Node* out = make(Kind::List);
  out->items = Items{space, static_cast<uint32_t>(n)};
  return out;
}


void Simplifier::grow_contents() {
  std::vector<std::pair<uint64_t, Facts*>> old(contents_.size() * 2, {0, nullptr});
  old.swap(contents_);
  size_t mask = contents_.size() - 1;
  for (const auto& [hash, chain] : old) {
    if (!chain) continue;
    size_t k = hash & mask;
    while (contents_[k].second) k = (k + 1) & mask;
    contents_[k] = {hash, chain};
  }
}

void Simplifier::reset() {
  std::fill(contents_.begin(), contents_.end(), std::pair<uint64_t, Facts*>{0, nullptr});
  n_contents_ = 0;
  symbols_.clear();
  std::fill(std::begin(recent_syms_), std::end(recent_syms_), nullptr);
  facts_.clear();
  texts_.clear();
  canonicals_.clear();
  canonical_texts_.reset();
  stored_texts_.reset();
  nodes_.clear();
  items_.reset();
  name_nodes_.clear();
  std::fill(std::begin(heads_), std::end(heads_), nullptr);
  param_ = sym("?");
}

template <class Body>
static int guarded(Failure& failure, Body body) {
  try {
    body();
    return 0;
  } catch (const Raise& e) {
    failure = Failure{e.kind, e.message};
  } catch (const std::bad_alloc&) {
    failure = Failure{Err::Memory, "out of memory in the simplifier"};
  }
  return static_cast<int>(failure.kind);
}

int Simplifier::canonical_form(Node* tree, const Canonical** out, bool with_tree) {
  int code = guarded(failure_, [&] { *out = Rules(*this).canonical_form(tree, with_tree); });
  if (code || (*out)->fits) return code;
  failure_ = Failure{Err::TooManyParameters, "the simplified model needs more than " +
                                                 std::to_string(names_.size()) + " parameters"};
  return static_cast<int>(Err::TooManyParameters);
}
int Simplifier::canonical_tree(const Canonical& c, Node** out) {
  return guarded(failure_, [&] { *out = Rules(*this).canonical_tree(c); });
}
int Simplifier::simplify(Node* tree, Node** out) {
  return guarded(failure_, [&] { *out = Rules(*this).simp(tree); });
}
int Simplifier::source_of(Node* t, std::string* out) {
  return guarded(failure_, [&] { *out = Rules(*this).src(t); });
}
int Simplifier::skeleton_of(Node* t, std::string* out) {
  return guarded(failure_, [&] { *out = Rules(*this).skeleton(t); });
}
int Simplifier::size_of(Node* t, int64_t* out) {
  return guarded(failure_, [&] { *out = Rules(*this).size(t); });
}
int Simplifier::content_id(Node* t, uint64_t* out) {
  return guarded(failure_, [&] { *out = Rules(*this).facts(t)->id; });
}

}  // namespace ndvm::simp
#pragma GCC visibility pop

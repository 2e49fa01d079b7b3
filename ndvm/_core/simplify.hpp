// The canonical form of search candidates in the core (ndvm.cosearch.simplify is its Python face).
// A tree is a graph of immutable Nodes in the Simplifier's arena; each rule's result is memoized
// per list content (Facts), and where a rule asks whether two arguments are the same object
// (Python's `is`) it compares Node pointers, the memo handing back one Node per content.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "arena.hpp"

// The simplifier's code is bound within the extension (its one user): hidden, its functions are
// called directly, not through the PLT, and may be inlined into one another (a symbol the
// loader may interpose is neither; the rules make many small calls each canonical form).
#pragma GCC visibility push(hidden)
namespace ndvm::simp {

enum class Kind : uint8_t { Sym = 0, Int = 1, Float = 2, Bool = 3, List = 4 };

struct Facts;
struct Node;

// A list's items: a span of the Simplifier's arena (a Node never changes once made, so its
// items are written once, where the list is made, and freed with every Node at a reset).
struct Items {
  Node* const* p = nullptr;
  uint32_t n = 0;
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  Node* operator[](size_t k) const { return p[k]; }
  Node* const* begin() const { return p; }
  Node* const* end() const { return p + n; }
};

// A symbol's Node holds in ``i`` what the rules ask of its name (found once, when it is made).
enum SymbolFlag : int64_t { kParamName = 1, kMark = 2 };

// The names the rules dispatch on, a code each: a symbol's Node holds its name's code (kNoHead
// for any other name), found once when it is made, so a rule compares one byte where it
// compared texts, and makes a head's Node by its code (Simplifier::head) where it looked the
// name up. In three runs, each a range: the arithmetic heads (folded and rewritten), within
// them the functions a constant is folded through (Python's _FOLD), and the special forms
// (a name they bind is never inlined).
enum Head : uint8_t {
  kNoHead = 0,
  kPlus, kMinus, kTimes, kDivide,                                      // arithmetic ...
  kSin, kCos, kExp, kLog, kSqrt, kTanh, kTan, kAtan, kAbs, kSquare,    // ... and folded
  kPow, kExpt,
  kQuote, kIf, kCond, kCase, kAnd, kOr, kWhen, kUnless, kBegin, kLet,  // special forms
  kLetStar, kLetrec, kLetrecStar, kLambda, kDefine, kLoop, kRecur, kElse,
  kHeads,
};
constexpr Head kFirstArith = kPlus, kLastArith = kExpt, kFirstFold = kSin, kFirstSpecial = kQuote;
// each code's name (kNoHead's empty)
extern const char* const kHeadNames[kHeads];

// (one cache line, the whole Node: the canonical form of a child is bound by the memory it
// reads; the texts are the Simplifier's, pointed to)
struct alignas(64) Node {
  Kind kind = Kind::Sym;
  bool b = false;
  Head head = kNoHead;        // a symbol's name's code (kNoHead for every other Node)
  // an integer's value; a symbol's SymbolFlags; a list's content number (its Facts' id) once
  // its Facts are known: a list's content hash reads each list item's number from the item's
  // own Node, not from its Facts (another cache line, most often cold: a child's sub-lists were
  // met when its parent was bred, rounds before)
  int64_t i = 0;
  Items items;                // a list's items
  Facts* facts = nullptr;     // a list's content facts, found once
  double f = 0.0;
  const std::string* name = nullptr;  // a symbol's name (its key in the symbol table)
  const std::string* text = nullptr;  // a number's source, once written (a pooled Text)

  const std::string& s() const { return *name; }  // (a symbol's)
};

static_assert(sizeof(Node) == 64, "a Node is one cache line");

// A number's source text, pooled as the Nodes are: a reused one keeps its buffer (no allocation
// in the steady state).
struct Text {
  std::string s;
  void renew() { s.clear(); }
};

// What is known of one list content (each field computed when first asked): two cache lines,
// the fields a lookup and the memo read first in the first.
struct alignas(64) Facts {
  Facts* same_hash = nullptr;  // the next content whose items hash alike
  Items items;                 // the items of the first list met with this content
  uint64_t id = 0;  // unique for the Simplifier's whole life (never reused after a reset)
  Node* simp = nullptr;
  Node* lift = nullptr;
  int64_t size = -1;
  int64_t occ = -1, marks = -1;
  int64_t canonical = -1;   // the canonical form of this (simplified) content, in canonicals_
  bool pull_known = false;
  char pull_group = 0;      // '*' or '+', 0 for none
  int8_t slotted = -1;      // whether it has a free scale of its own (Rules::slotted), -1 unknown
  Node* pull_rest = nullptr;
  // the canonical form of this (lifted) content renamed, in canonicals_: the lifting of many
  // simplified contents meets one content, whose renaming is then not repeated
  int64_t renamed = -1;
  // (stored texts, see stored(): a pointer each, where a view each would not fit)
  const char *src = nullptr, *key = nullptr, *skel = nullptr;
};
static_assert(sizeof(Facts) == 128, "a Facts is two cache lines");

// A list content's source, key or skeleton (Facts::src, key, skel) is kept in the Simplifier's
// Arena of them, its length (4 bytes) before its bytes, until a reset: written once, in place,
// where a pooled std::string was allocated (most of them new, their room zeroed first), for each
// content whose text is asked. The text kept at p:
inline std::string_view stored(const char* p) {
  uint32_t n;
  std::memcpy(&n, p, sizeof n);
  return {p + sizeof n, n};
}

// The exceptions the rules raise, as the Python rules raised them.
enum class Err : int {
  None = 0, TooManyParameters = 1, Value = 2, Type = 3, Index = 4, Recursion = 5,
  StopIteration = 6, Overflow = 7, Memory = 8,
};

struct Failure {
  Err kind;
  std::string message;
};

inline int node_kind(const Node* n) { return static_cast<int>(n->kind); }

// The arithmetic heads the rules fold and rewrite (every other head is kept as written).
const std::vector<std::string>& arithmetic_heads();

// Objects made one at a time and forgotten all at once: blocks of kBlock, kept across a
// clear, so a Simplifier's steady state allocates nothing for its Nodes and Facts. An object
// without a destructor (a Node, a Facts) is constructed where it is made, in a block of raw
// memory (a new block's kBlock objects were each constructed when it was allocated, and then
// again when made: 0.69 M instructions of a 1,024-candidate damped search, the Nodes of its
// children and their canonical forms, until the pools' first reset);
// any other (a Text) is constructed with its block and renewed, T::renew, when it is made
// again (its buffer kept).
template <class T>
class Pool {
 public:
  // (inlined where it is called: a pointer bumped, the step to the next block apart; a
  // canonical form makes dozens of Nodes)
  [[gnu::always_inline]] T* make() {
    if (__builtin_expect(next_ == end_, 0)) next_block();
    T* out = next_++;
    if constexpr (kRaw)
      new (out) T();
    else
      out->renew();
    return out;
  }
  size_t size() const { return done_ + static_cast<size_t>(next_ - begin_); }
  void clear() {
    block_ = done_ = 0;
    begin_ = next_ = end_ = nullptr;
  }

 private:
  static constexpr size_t kBlock = 4096;
  static constexpr bool kRaw = std::is_trivially_destructible_v<T>;
  struct Free {  // (a block as it was allocated)
    void operator()(T* p) const {
      if constexpr (kRaw)
        ::operator delete(p, std::align_val_t(alignof(T)));
      else
        delete[] p;
    }
  };
  [[gnu::noinline]] void next_block() {
    if (begin_) {  // (the block filled; none yet after a clear)
      done_ += kBlock;
      ++block_;
    }
    if (block_ == blocks_.size()) {
      if constexpr (kRaw)
        blocks_.emplace_back(static_cast<T*>(
            ::operator new(kBlock * sizeof(T), std::align_val_t(alignof(T)))));
      else
        blocks_.emplace_back(new T[kBlock]);
    }
    begin_ = next_ = blocks_[block_].get();
    end_ = begin_ + kBlock;
  }
  std::vector<std::unique_ptr<T, Free>> blocks_;
  size_t block_ = 0;  // the block made from
  size_t done_ = 0;   // the objects made in the blocks before it
  T *begin_ = nullptr, *next_ = nullptr, *end_ = nullptr;  // its objects, the next, its end
};

// An object's address -> a value (the bindings' held lists: their Nodes; Breeder's parents:
// their entries' places, breed.pxi's ParentsKept): open addressing in a power-of-two table of
// (address, value) slots, an empty slot's address 0. A lookup reads one slot where a
// std::unordered_map reads a bucket and then a node elsewhere: a child's every list is looked
// up, most of them missing. ``find`` gives V{} for an address not in the table.
template <class V>
class AddressTable {
 public:
  V find(uintptr_t key) const {
    if (slots_.empty()) return V{};
    for (size_t k = spot(key);; k = (k + 1) & mask_) {
      const Slot& s = slots_[k];
      if (s.key == key) return s.value;
      if (!s.key) return V{};
    }
  }
  void insert(uintptr_t key, V value) {  // (key not 0)
    if (2 * (n_ + 1) > slots_.size()) grow();
    for (size_t k = spot(key);; k = (k + 1) & mask_) {
      Slot& s = slots_[k];
      if (s.key == key) {
        s.value = value;
        return;
      }
      if (!s.key) {
        s = Slot{key, value};
        ++n_;
        return;
      }
    }
  }
  void clear() {
    if (n_) std::fill(slots_.begin(), slots_.end(), Slot{});
    n_ = 0;
  }
  void swap(AddressTable& other) {
    slots_.swap(other.slots_);
    std::swap(mask_, other.mask_);
    std::swap(n_, other.n_);
    std::swap(shift_, other.shift_);
  }
  size_t size() const { return n_; }

 private:
  struct Slot {
    uintptr_t key = 0;
    V value{};
  };
  size_t spot(uintptr_t key) const {  // (Fibonacci hashing of the address's high bits)
    return static_cast<size_t>(((key >> 4) * 0x9e3779b97f4a7c15ULL) >> shift_) & mask_;
  }
  void grow() {
    // (from a few slots, doubled as the entries come: a table cleared every round, as
    // ParentsKept's two are for a round's ~70 records, then writes the slots its entries need,
    // not a first 1,024's 16 KB, the whole first-level data cache, twice a round)
    std::vector<Slot> old(slots_.empty() ? 16 : slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    shift_ = 64;
    for (size_t m = slots_.size(); m > 1; m >>= 1) --shift_;
    n_ = 0;
    for (const Slot& s : old)
      if (s.key) insert(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, n_ = 0;
  int shift_ = 64;
};
using AddressMap = AddressTable<Node*>;

// A text kept in an Arena: its bytes (UTF-8, not terminated) and their count.
struct TextView {
  const char* data = nullptr;
  size_t size = 0;
};

// A canonical form: its source, skeleton (sexpr.skeleton) and size, the tree it renames
// (``from``, its parameters renamed each its own name or, ``shared``, by name) and the renamed
// tree once made (``tree``, nullptr before: a child's canonical form is computed without it,
// most children's trees never being read; Simplifier::canonical_tree makes it when asked);
// fits false (the rest unset) when the model needs more parameters than there are names. The
// texts are copied end to end into the Simplifier's Arena of them (no allocation in the steady
// state; each had been a pooled std::string, most of them new ones that allocated their room),
// valid until a reset.
struct Canonical {
  Node* from = nullptr;
  Node* tree = nullptr;
  bool shared = false;
  TextView source, skeleton;
  int64_t size = 0;
  bool fits = false;
};

// s's bytes copied to ``to`` (room for them there): a text of at most 16 bytes, most atoms' and
// names', by fixed-size moves that overlap (a call to memcpy each was a tenth of a renaming's
// instructions).
[[gnu::always_inline]] inline void put_text(char* to, std::string_view s) {
  size_t n = s.size();
  const char* from = s.data();
  if (n >= 8 && n <= 16) {
    std::memcpy(to, from, 8);
    std::memcpy(to + n - 8, from + n - 8, 8);
  } else if (n >= 4 && n < 8) {
    std::memcpy(to, from, 4);
    std::memcpy(to + n - 4, from + n - 4, 4);
  } else if (n > 0 && n < 4) {
    to[0] = from[0];
    to[n / 2] = from[n / 2];
    to[n - 1] = from[n - 1];
  } else if (n) {
    std::memcpy(to, from, n);
  }
}

// A text written left to right, its room kept from one use to the next (an append is inlined
// where it is called: a std::vector's push_back and insert were calls, for each parenthesis,
// space and atom of a canonical form's source and skeleton).
class TextBuffer {
 public:
  TextBuffer() { grow(256); }
  [[gnu::always_inline]] void put(char c) {
    if (__builtin_expect(n_ == cap_, 0)) grow(2 * cap_);
    p_[n_++] = c;
  }
  [[gnu::always_inline]] void put(std::string_view s) {
    if (__builtin_expect(n_ + s.size() > cap_, 0)) grow(2 * (n_ + s.size()));
    put_text(p_ + n_, s);
    n_ += s.size();
  }
  void clear() { n_ = 0; }
  const char* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  [[gnu::noinline]] void grow(size_t cap) {
    std::unique_ptr<char[]> p(new char[cap]);
    if (n_) std::memcpy(p.get(), p_, n_);
    buf_ = std::move(p);
    p_ = buf_.get();
    cap_ = cap;
  }
  std::unique_ptr<char[]> buf_;
  char* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

class Simplifier {
 public:
  explicit Simplifier(std::vector<std::string> params);

  // Node construction (the Python bindings build a tree with these). A symbol's Node is shared
  // by every occurrence of the name (a Node is never changed once made).
  Node* sym(const std::string& name);
  // The symbol of a head's name (made as sym(kHeadNames[h]) when first asked after a reset, as
  // the rules made it by name: the same Nodes, made at the same moments).
  [[gnu::always_inline]] Node* head(Head h) {
    Node*& n = heads_[h];
    if (!n) n = sym(kHeadNames[h]);
    return n;
  }
  Node* integer(int64_t v);
  Node* real(double v);
  Node* boolean(bool v);
  Node* list(const std::vector<Node*>& items);
  Node* list(Node* const* items, size_t n);

  // Forgets every node and memo when they outgrow the limits (call only between trees: every
  // Node handed out before is invalid afterwards). True when it did.
  bool maybe_reset() {  // (inlined: the bindings ask before every tree)
    if (facts_.size() <= kContentLimit && nodes_.size() <= kNodeLimit) return false;
    reset();
    return true;
  }
  // The content number the next new content gets (numbers count up for the Simplifier's life:
  // those met since a reset are at least this number as it was at the reset).
  uint64_t next_id() const { return next_id_; }
  // Whether every name this Simplifier has met (its parameters' and its symbols', since it was
  // made: not forgotten at a reset) is ASCII, and so every text it writes (names, numbers,
  // parentheses and spaces: the Python bindings make their str without decoding UTF-8).
  bool ascii() const { return ascii_; }

  // The entry points: each returns 0 or the Err of the exception (message in failure_message).
  // canonical_form points *out at the canonical form's record, the Simplifier's (no string
  // copied out: the caller reads it before its next call into the Simplifier, which may move
  // or overwrite it), its tree made (in the renaming's pass when it is new) when
  // ``with_tree``; TooManyParameters when it does not fit.
  int canonical_form(Node* tree, const Canonical** out, bool with_tree);
  // canonical_tree: the renamed tree of canonical form c (valid, as c's ``from``, until a
  // reset): c's own when it has one, else a new one each call.
  int canonical_tree(const Canonical& c, Node** out);
  int simplify(Node* tree, Node** out);
  int source_of(Node* t, std::string* out);
  int skeleton_of(Node* t, std::string* out);
  int size_of(Node* t, int64_t* out);
  int content_id(Node* t, uint64_t* out);
  const std::string& failure_message() const { return failure_.message; }

  // (bounds memory, and keeps the memo within a core's cache: the search's canonical forms cost
  // 16 us each at 50,000 contents and 60,000 Nodes against 20 us at 200,000 and 250,000, the
  // calibrations between two rounds evicting a larger memo; a reset costs only recomputation.
  // At these limits (Facts 128 bytes, a Node 64: ~4 MB at most against ~10 MB at 50,000 and
  // 60,000) a damped island's own time a candidate was lower than at 50,000 in 34 of 48
  // alternated runs, by 0-8% by the sitting; the same on a 9-input Feynman set:
  // bench/results/memo_limit_2026-12-07_s32.txt)
  static constexpr size_t kContentLimit = 20000;
  static constexpr size_t kNodeLimit = 24000;

 private:
  friend struct Rules;
  void reset();  // forgets every node and memo
  Node* make(Kind kind) {
    Node* n = nodes_.make();
    n->kind = kind;
    return n;
  }
  // the chain of the contents whose items hash to ``hash`` (a new, empty one when none do)
  // (inlined into the content lookup, its one caller)
  [[gnu::always_inline]] Facts*& content_slot(uint64_t hash) {
    if (__builtin_expect(2 * (n_contents_ + 1) > contents_.size(), 0)) grow_contents();
    size_t mask = contents_.size() - 1;
    for (size_t k = hash & mask;; k = (k + 1) & mask) {
      auto& slot = contents_[k];
      if (!slot.second) {  // (the caller fills it: a new chain)
        slot.first = hash;
        ++n_contents_;
        return slot.second;
      }
      if (slot.first == hash) return slot.second;
    }
  }
  void grow_contents();
  std::vector<std::string> names_;
  std::unordered_set<std::string> params_;
  Pool<Node> nodes_;
  Pool<Facts> facts_;
  Pool<Text> texts_;
  Arena stored_texts_;  // the list contents' texts (stored()), forgotten at a reset
  // The canonical forms met, by the content their input simplified to (Facts::canonical): the
  // lifting, simplifying and renaming after the first simplification read that content alone,
  // and a search's children simplify again and again to a content met before. Forgotten at a
  // reset, with the Nodes.
  std::vector<Canonical> canonicals_;
  Canonical last_;  // (the canonical form of a tree that simplified to an atom: not memoized)
  // renamed's source and skeleton buffers, their room kept from one canonical form to the next
  TextBuffer rename_src_, rename_skel_;
  // the canonical forms' sources and skeletons (Canonical's texts), forgotten at a reset
  Arena canonical_texts_;
  // items' hash -> its contents (a chain of Facts): open addressing, a power-of-two table of
  // (hash, chain) slots, an empty slot's chain null
  std::vector<std::pair<uint64_t, Facts*>> contents_;
  size_t n_contents_ = 0;
  Arena items_;  // the lists' items (Items), forgotten at a reset with the Nodes
  std::unordered_map<std::string, Node*> symbols_;
  // the Nodes of the names met last, a slot a name's length and first letters pick (the rules
  // make their heads by name, `+` and `*` again and again: a hit compares, never hashes, one)
  Node* recent_syms_[64] = {};
  static size_t recent_slot(const std::string& name) {
    size_t n = name.size();
    return (n * 31 + (n ? static_cast<unsigned char>(name[0]) : 0) +
            (n > 1 ? 7 * static_cast<unsigned char>(name[1]) : 0)) & 63;
  }
  uint64_t next_id_ = 1;
  bool ascii_ = true;  // (see ascii())
  Failure failure_{Err::None, ""};
  Node* param_ = nullptr;  // the mark of a parameter still to be named
  Node* heads_[kHeads] = {};  // each head's symbol, once asked (head())
  // the Node of each parameter name (names_[k]), found when first asked (renaming names the
  // parameters of every canonical form: a name's Node is then one read, not a lookup by name)
  std::vector<Node*> name_nodes_;
  Node* name_node(size_t k) {
    if (name_nodes_.empty()) name_nodes_.assign(names_.size(), nullptr);
    Node*& n = name_nodes_[k];
    if (!n) n = sym(names_[k]);
    return n;
  }
};

}  // namespace ndvm::simp
#pragma GCC visibility pop

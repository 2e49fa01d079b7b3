// The expanded program: the reader's datums after syntax checking, desugaring (cond, case, when,
// unless, let*, named let, internal defines, and/or) and name resolution (lexical slots, primitive
// ids, free names). Both clients start from this tree: dmci walks it, bytecode compiles it. It is
// built once per program, immutable afterwards, and shared read-only across threads.
#pragma once
#include <algorithm>
#include <new>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reader.hpp"
#include "value.hpp"

namespace ndvm {

enum class NodeKind : uint8_t {
  Const,     // constant: a number, boolean, '() or a quoted symbol
  Quote,     // a quoted list, built at run time from `datum`
  Local,     // variable at (depth, slot): `depth` frames up, slot `slot`
  Free,      // free name `slot` (bound by the caller: parameter, data or constant)
  PrimRef,   // a primitive used as a value; `slot` is its id
  If,        // kids: test, then, else (else may be absent)
  Lambda,    // kids: body; nparams required + rest; frame_size slots
  Call,      // kids: operator, arguments...
  PrimCall,  // kids: arguments; `slot` is the primitive id
  Let,       // kids: inits (evaluated outside), body; new frame of frame_size
  Letrec,    // kids: inits (evaluated inside, in order, into `slots`), body
  Begin,     // kids: expressions; value of the last
  And,       // kids: a, b  (value of a if a is false, else b)
  Or,        // kids: a, b  (value of a if a is true, else b)
  Loop,      // kids: inits (evaluated outside), body; recur re-enters the body
  Recur,     // kids: new values of the loop variables; `depth` frames up to the loop frame
};

struct Node {
  explicit Node(NodeArena* arena) : kids(arena), slots(ArenaAllocator<uint32_t>(arena)) {}
  NodeKind kind = NodeKind::Const;
  bool rest = false;        // Lambda: takes a rest argument
  bool captures = false;    // Loop: a lambda inside the body may capture the loop frame
  uint32_t depth = 0;       // Local, Recur
  uint32_t slot = 0;        // Local slot, Free index, PrimRef/PrimCall id
  uint32_t nparams = 0;     // Lambda: required parameters
  uint32_t frame_size = 0;  // Lambda, Let, Letrec, Loop
  Value constant;           // Const
  int32_t datum = -1;       // the datum this node came from (positions, error text, Quote)
  const Source* src = nullptr;
  const Node* loop = nullptr;  // Recur: its loop
  ArenaList<const Node*> kids;
  std::vector<uint32_t, ArenaAllocator<uint32_t>> slots;  // Letrec: slot assigned by each init
  std::string_view name;  // Lambda: its name for messages ("lambda" when anonymous; its text
                          // in the arena of the nodes, or static)
  SrcPos pos() const { return src->at(datum).pos; }
  std::string form() const { return src->show(datum); }
};

// Throws a runtime error at node n (its position, form text and file).
[[noreturn]] inline void fail_at(const Node* n, ErrorKind k, const std::string& msg) {
  Error e(k, msg, n->pos(), n->form());
  e.file_ = n->src->name_;
  throw e;
}

// Gives an error raised without a position (a primitive's, a limit's) the position of node n.
inline void locate(Error& e, const Node* n) {
  if (e.pos_.line == 0) {
    e.pos_ = n->pos();
    e.form_ = n->form();
    e.file_ = n->src->name_;
  }
}

struct FreeName {
  std::string name;
  SrcPos pos;  // first occurrence
};

class Expanded {
  // (first: destroyed after the Source and the nodes whose storage it holds)
  NodeArena arena_;

 public:
  Expanded() : src_(&arena_), free_(ArenaAllocator<FreeName>(&arena_)) {}
  Expanded(const Expanded&) = delete;
  Expanded& operator=(const Expanded&) = delete;

  Source src_;  // the program's own, its datums and lists in the arena
  std::shared_ptr<Source> prelude_;
  const Node* root_ = nullptr;   // a Letrec holding the top-level defines, whose body is the program
  // in first-occurrence order (the vector in the arena; a name's text, past a short string's
  // room, on the heap)
  std::vector<FreeName, ArenaAllocator<FreeName>> free_;
  const Node* result_ = nullptr; // the last top-level expression (for result errors)
  // Whether it has no lambda (its own or a prelude function's), no loop and no data primitive
  // (lists, vectors, matrices): each node then runs once a lane, its run's length bounded by its
  // size and its inputs' (what a caller may run holding a lock it would release for a long run)
  bool bounded_ = false;
  // Sizes the arena's first chunk (before the program is read) for a text of `chars` characters:
  // the reader reserves a datum and a kid every two characters, 16 symbols and a symbol index of
  // 32 slots, the expander a free name a symbol, and a program makes about one node a datum and
  // as many kids (every node but the root is one), so a program usually takes one allocation.
  void reserve_for(size_t chars) {
    const size_t datums = chars / 2 + 4;
    arena_.reserve(datums * (sizeof(Datum) + sizeof(int32_t)) + 32 * sizeof(int32_t) +
                   16 * (sizeof(std::string) + sizeof(FreeName)) + 4 * sizeof(int32_t) +
                   (datums + 4) * (sizeof(Node) + sizeof(const Node*)));
  }
  // A new node, in the arena: nodes point at each other, and the arena's chunks never move. (No
  // node's destructor runs: all a node holds, its lists and its name, is in the arena too, and
  // goes with it.)
  Node* make(NodeKind k, const Source* s, int32_t datum) {
    Node* n = new (arena_.alloc(sizeof(Node))) Node(&arena_);
    n->kind = k;
    n->src = s;
    n->datum = datum;
    return n;
  }
  // A copy of `text` in the arena (a lambda's name), which lives as long as the nodes.
  std::string_view keep(std::string_view text) {
    if (text.empty()) return {};
    char* p = static_cast<char*>(arena_.alloc(text.size()));
    std::copy(text.begin(), text.end(), p);
    return {p, text.size()};
  }

 private:
  static_assert(alignof(Node) <= 8 && alignof(Datum) <= 8, "the arena aligns to 8 bytes");
};

// Where the program's result expression starts: input errors that no form caused (too many lanes
// for the memory limit) are reported there.
inline SrcPos result_pos(const Expanded& x) { return x.result_ ? x.result_->pos() : SrcPos{1, 1}; }

// Reads and expands a program. Throws Error (ReadError, FormError, EvalError for a primitive called
// with the wrong number of arguments) with file:line:col.
// (text as read_source takes it: a NUL follows it.)
std::shared_ptr<const Expanded> expand_program(std::string_view text, const std::string& name);

// The Scheme prelude both clients load (map, filter, fold-left, ...).
const char* prelude_text();

}  // namespace ndvm

// The expanded program: the reader's datums after syntax checking, desugaring (cond, case, when,
// unless, let*, named let, internal defines, and/or) and name resolution (lexical slots, primitive
// ids, free names). Both clients start from this tree: dmci walks it, bytecode compiles it. It is
// built once per program, immutable afterwards, and shared read-only across threads.
#pragma once
#include <algorithm>
#include <new>
#include <memory>
#include <string>
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

// Storage for the nodes' kid lists: chunks owned by the program's Expanded and freed with it, so a
// candidate's dozen short lists are not a dozen malloc/free pairs. What a list outgrows stays in
// its chunk until then (lists are short, built once, and reserved to their size where it is known).
class KidArena {
 public:
  KidArena() = default;
  KidArena(const KidArena&) = delete;
  KidArena& operator=(const KidArena&) = delete;
  ~KidArena() {
    while (head_) {
      Chunk* next = head_->next;
      ::operator delete(head_);
      head_ = next;
    }
  }
  // Sizes the first chunk (before any allocation).
  void reserve(size_t bytes) {
    if (!head_) next_size_ = std::max(bytes + sizeof(Chunk), kMinChunk);
  }
  void* alloc(size_t bytes) {
    bytes = (bytes + 7) & ~size_t(7);
    if (size_t(end_ - pos_) < bytes) {
      const size_t size = std::max(next_size_, bytes + sizeof(Chunk));
      head_ = new (::operator new(size)) Chunk{head_};
      pos_ = reinterpret_cast<char*>(head_) + sizeof(Chunk);
      end_ = reinterpret_cast<char*>(head_) + size;
      next_size_ = 2 * size;
    }
    void* p = pos_;
    pos_ += bytes;
    return p;
  }

 private:
  struct Chunk {
    Chunk* next;  // (the one made before; the storage follows this header)
  };
  static constexpr size_t kMinChunk = 256;
  Chunk* head_ = nullptr;
  char* pos_ = nullptr;
  char* end_ = nullptr;
  size_t next_size_ = kMinChunk;
};

// A kid list's allocator: from a KidArena, whose chunks free the storage at once (deallocate does
// nothing), or the heap without one (a Node made otherwise than by Expanded::make).
template <class T>
struct KidAllocator {
  using value_type = T;
  KidArena* arena = nullptr;
  KidAllocator() = default;
  explicit KidAllocator(KidArena* a) : arena(a) {}
  template <class U>
  KidAllocator(const KidAllocator<U>& o) : arena(o.arena) {}
  T* allocate(size_t n) {
    return arena ? static_cast<T*>(arena->alloc(n * sizeof(T))) : std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (!arena) std::allocator<T>().deallocate(p, n);
  }
  friend bool operator==(const KidAllocator& a, const KidAllocator& b) {
    return a.arena == b.arena;
  }
  friend bool operator!=(const KidAllocator& a, const KidAllocator& b) {
    return a.arena != b.arena;
  }
};

struct Node {
  Node() = default;
  explicit Node(KidArena* kids_arena) : kids(KidAllocator<const Node*>(kids_arena)) {}
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
  std::vector<const Node*, KidAllocator<const Node*>> kids;
  std::vector<uint32_t> slots;  // Letrec: slot assigned by each init
  std::string name;             // Lambda: its name for messages ("lambda" when anonymous)
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
 public:
  std::shared_ptr<Source> src_;
  std::shared_ptr<Source> prelude_;
  const Node* root_ = nullptr;   // a Letrec holding the top-level defines, whose body is the program
  std::vector<FreeName> free_;   // in first-occurrence order
  const Node* result_ = nullptr; // the last top-level expression (for result errors)
  // Sizes the first block of nodes: a program makes about one node per datum, so its nodes
  // usually take one allocation (a std::deque took one per three nodes of this size).
  // (about as many kids as nodes: every node but the root is one kid)
  void reserve_nodes(size_t n) {
    if (blocks_.empty()) new_block(n);
    kids_.reserve(n * sizeof(const Node*));
  }
  Node* make(NodeKind k, const Source* s, int32_t datum) {
    if (blocks_.empty() || blocks_.back().size() == blocks_.back().capacity())
      new_block(blocks_.empty() ? kMinBlock : 2 * blocks_.back().capacity());
    Node* n = &blocks_.back().emplace_back(&kids_);
    n->kind = k;
    n->src = s;
    n->datum = datum;
    return n;
  }

 private:
  // Nodes point at each other, so they never move: a block is filled up to its capacity, never
  // past it (no reallocation), and a full one is followed by a new, larger block.
  static constexpr size_t kMinBlock = 32;
  KidArena kids_;  // (declared first: destroyed after the nodes whose kids it holds)
  std::vector<std::vector<Node>> blocks_;
  void new_block(size_t n) {
    blocks_.emplace_back();
    blocks_.back().reserve(std::max(n, kMinBlock));
  }
};

// Where the program's result expression starts: input errors that no form caused (too many lanes
// for the memory limit) are reported there.
inline SrcPos result_pos(const Expanded& x) { return x.result_ ? x.result_->pos() : SrcPos{1, 1}; }

// Reads and expands a program. Throws Error (ReadError, FormError, EvalError for a primitive called
// with the wrong number of arguments) with file:line:col.
std::shared_ptr<const Expanded> expand_program(std::string text, const std::string& name);

// The Scheme prelude both clients load (map, filter, fold-left, ...).
const char* prelude_text();

}  // namespace ndvm

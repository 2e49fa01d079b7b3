// The reader: program text -> a flat pool of datums (numbers, booleans, symbols, lists), each with
// its line:column. A Source owns the pool and its symbol table (not the text: nothing reads it
// after the reader); it is immutable once read and shared read-only by every client and thread.
// `[a b c]` reads as `(vec a b c)`, `'x` as `(quote x)`. A program's Source keeps its pool in the
// program's NodeArena (with its nodes, ast.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "error.hpp"

namespace ndvm {

// Storage for a program's datums and their lists (its Source's), and its nodes, their kid and slot
// lists and their lambdas' names (ast.hpp): chunks owned by the program's Expanded and freed with
// it, so a candidate's datums, few dozen nodes and short lists are about one allocation, not one
// each. What a vector outgrows stays in its chunk until then (they are short, built once, and
// reserved to their size where it is known).
class NodeArena {
 public:
  NodeArena() = default;
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;
  ~NodeArena() {
    while (head_) {
      Chunk* next = head_->next;
      give_back(head_);
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
      const size_t size = chunk_size(std::max(next_size_, bytes + sizeof(Chunk)));
      head_ = new (take(size)) Chunk{head_, size};
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
    size_t size;
  };
  static constexpr size_t kMinChunk = 256;
  Chunk* head_ = nullptr;
  char* pos_ = nullptr;
  char* end_ = nullptr;
  size_t next_size_ = kMinChunk;

  // A thread's spare chunks of up to kSpareKiB KiB, a few of each whole number of KiB: a
  // search's candidates are programs of much the same size, made and freed by the thousand, and
  // a chunk of a few KiB was the dearest allocation of each (malloc's large-chunk path). A chunk
  // goes back to the spares of the thread that frees it (any thread may free a program).
  static constexpr size_t kSpareKiB = 16, kSpareEach = 4;
  struct Spares {
    void* chunk[kSpareKiB][kSpareEach] = {};
    uint8_t count[kSpareKiB] = {};
    ~Spares() {
      for (size_t k = 0; k < kSpareKiB; ++k)
        while (count[k]) ::operator delete(chunk[k][--count[k]]);
      closed() = true;
    }
  };
  static Spares& spares() {
    static thread_local Spares s;
    return s;
  }
  static bool& closed() {  // (the thread's Spares are destroyed: it is exiting)
    static thread_local bool c = false;
    return c;
  }
  // A chunk's size: whole KiB up to kSpareKiB KiB (the sizes spares are kept of).
  static size_t chunk_size(size_t bytes) {
    return bytes <= kSpareKiB * 1024 ? (bytes + 1023) & ~size_t(1023) : bytes;
  }
  static void* take(size_t size) {
    if (size <= kSpareKiB * 1024 && !closed()) {
      Spares& s = spares();
      const size_t k = size / 1024 - 1;
      if (s.count[k]) return s.chunk[k][--s.count[k]];
    }
    return ::operator new(size);
  }
  static void give_back(Chunk* c) {
    const size_t size = c->size;
    if (size <= kSpareKiB * 1024 && !closed()) {
      Spares& s = spares();
      const size_t k = size / 1024 - 1;
      if (s.count[k] < kSpareEach) {
        s.chunk[k][s.count[k]++] = c;
        return;
      }
    }
    ::operator delete(c);
  }
};

// A vector's allocator: from a NodeArena, whose chunks free the storage at once (deallocate does
// nothing), or the heap without one (a Source read on its own).
template <class T>
struct ArenaAllocator {
  using value_type = T;
  NodeArena* arena = nullptr;
  ArenaAllocator() = default;
  explicit ArenaAllocator(NodeArena* a) : arena(a) {}
  template <class U>
  ArenaAllocator(const ArenaAllocator<U>& o) : arena(o.arena) {}
  T* allocate(size_t n) {
    return arena ? static_cast<T*>(arena->alloc(n * sizeof(T))) : std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (!arena) std::allocator<T>().deallocate(p, n);
  }
  friend bool operator==(const ArenaAllocator& a, const ArenaAllocator& b) {
    return a.arena == b.arena;
  }
  friend bool operator!=(const ArenaAllocator& a, const ArenaAllocator& b) {
    return a.arena != b.arena;
  }
};

// A short list of trivially copyable items in a NodeArena (a node's kids): what a vector of them
// does for its readers (size, [], iteration), with an inline push_back and reserve whose room
// is taken from the arena directly (a vector's were calls each, through its allocator's general
// path: the expander makes a few dozen such lists a candidate). Outgrown room stays in the arena
// (lists are short and reserved to their size where it is known); nothing to free.
template <class T>
class ArenaList {
 public:
  explicit ArenaList(NodeArena* arena) : arena_(arena) {}
  ArenaList(const ArenaList&) = delete;
  ArenaList& operator=(const ArenaList&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }

  // (always inlined: the compiler made each push a call; growing is the rare part)
  [[gnu::always_inline]] void push_back(const T& x) {
    if (size_ == room_) grow(room_ ? 2 * size_t(room_) : 2);
    data_[size_++] = x;
  }
  // Room for n items in all (none made).
  [[gnu::always_inline]] void reserve(size_t n) {
    if (n > room_) grow(n);
  }

 private:
  static_assert(std::is_trivially_copyable_v<T>, "items are copied as bytes, never destroyed");
  NodeArena* arena_;
  T* data_ = nullptr;
  uint32_t size_ = 0, room_ = 0;

  [[gnu::noinline]] void grow(size_t n) {
    T* more = static_cast<T*>(arena_->alloc(n * sizeof(T)));
    if (size_) std::memcpy(static_cast<void*>(more), data_, size_ * sizeof(T));
    data_ = more;
    room_ = uint32_t(n);
  }
};

enum class DatumKind : uint8_t { Num, Bool, Sym, List };

struct Datum {
  DatumKind kind;
  bool is_int = false;   // a number written without '.', 'e' (exact in Scheme terms)
  bool dotted = false;   // a list with a `. tail`; the tail is the last kid
  int32_t sym = -1;      // symbol id (Sym)
  double num = 0.0;      // value (Num); 0/1 (Bool)
  int32_t first = 0;     // List: kids are Source::kids_[first, first + count)
  int32_t count = 0;
  SrcPos pos;
};

class Source {
 public:
  Source() = default;
  // A Source whose datums, lists and symbol index are in `arena` (a program's: ast.hpp)
  explicit Source(NodeArena* arena)
      : data_(ArenaAllocator<Datum>(arena)), kids_(ArenaAllocator<int32_t>(arena)),
        top_(ArenaAllocator<int32_t>(arena)), symbols_(ArenaAllocator<std::string>(arena)),
        symhash_(ArenaAllocator<size_t>(arena)), symindex_(ArenaAllocator<int32_t>(arena)) {}
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  std::string name_;
  std::vector<Datum, ArenaAllocator<Datum>> data_;
  std::vector<int32_t, ArenaAllocator<int32_t>> kids_;
  std::vector<int32_t, ArenaAllocator<int32_t>> top_;  // top-level datums in order
  // (the names' own text, past a short string's room, is on the heap: their destructors run)
  std::vector<std::string, ArenaAllocator<std::string>> symbols_;
  // Each name's name_hash, by symbol id (the scanner's, kept: the index's regrowth and the
  // expander's table of built-in names look names up by it, not hashing them again)
  std::vector<size_t, ArenaAllocator<size_t>> symhash_;
  // Symbol ids by name: open addressing over a power-of-two table (-1: empty), at most half full.
  // (Every name token is looked up: a hash of its few characters and a probe or two cost less
  // than scanning the names, or a std::unordered_map's node walk.)
  std::vector<int32_t, ArenaAllocator<int32_t>> symindex_;

  // s's symbol id, made the first time; `hash` is name_hash(s) (a scanner hashes as it reads).
  int32_t intern(std::string_view s, size_t hash);
  int32_t intern(std::string_view s);
  int32_t find_symbol(std::string_view s) const;
  const Datum& at(int32_t i) const { return data_[i]; }
  int32_t kid(const Datum& d, int i) const { return kids_[d.first + i]; }
  bool is_sym(int32_t i, int32_t sym) const {
    return data_[i].kind == DatumKind::Sym && data_[i].sym == sym;
  }
  const std::string& sym_name(int32_t i) const { return symbols_[data_[i].sym]; }
  size_t sym_hash(int32_t i) const { return symhash_[data_[i].sym]; }  // (name_hash of its name)
  // Writes datum i back as text (for error messages), cut at max_len characters.
  std::string show(int32_t i, size_t max_len = 80) const;

 private:
  void show_into(int32_t i, std::string& out, size_t max_len) const;
  // (s's slot in symindex_, or the empty one; `hash` is name_hash(s))
  size_t symbol_slot(std::string_view s, size_t hash) const;
  void reindex(size_t slots);
};

// Reads text into a new Source (the caller's text is read in place, never copied: a NUL must follow
// it, as one follows a std::string's or a Python str's UTF-8, for strtod to stop at). Throws
// Error(ReadError) with the position of the problem.
std::shared_ptr<Source> read_source(std::string_view text, const std::string& name);
// The same into `src`, a new (empty) Source.
void read_into(Source& src, std::string_view text, const std::string& name);

// Formats a real the way error messages and `show` print it.
std::string format_number(double x);

}  // namespace ndvm

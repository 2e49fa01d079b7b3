// The split value model. A Value is 16 bytes of plain structure: a tag plus either an inline
// uniform number, or an id pointing into the machine's lane buffers (a varying payload of L lanes),
// the pair heap, the element heap (vectors, matrices) or the mask buffers. Structure is never
// differentiated; only payload ids marked F_ACTIVE reach the tape.
#pragma once
#include <cstdint>

namespace ndvm {

enum class Tag : uint8_t { Nil, Bool, Num, Sym, Pair, Closure, Prim, Vec, Mat, Unspec };

enum : uint8_t {
  F_VARYING = 1,  // Num: id is a payload (L lanes); Bool: id is a lane mask
  F_ACTIVE = 2,   // Num: the payload depends on a parameter and is on the tape
};

struct Closure {
  const void* code;  // the client's lambda (dmci: AST node; bytecode: function proto)
  void* env;         // the client's captured environment
};

struct Value {
  Tag tag = Tag::Nil;
  uint8_t flags = 0;
  uint16_t rows = 0;  // Mat: rows
  uint32_t cols = 0;  // Vec: length; Mat: columns; Prim: primitive id
  union {
    double num;       // uniform Num, uniform Bool (0/1)
    uint64_t id;      // payload, mask, pair, element start, symbol id
    const void* ptr;  // Closure*
  };

  Value() : id(0) {}
  static Value nil() { return Value(); }
  static Value unspec() {
    Value v;
    v.tag = Tag::Unspec;
    return v;
  }
  static Value boolean(bool b) {
    Value v;
    v.tag = Tag::Bool;
    v.num = b ? 1.0 : 0.0;
    return v;
  }
  static Value mask(uint64_t mask_id) {
    Value v;
    v.tag = Tag::Bool;
    v.flags = F_VARYING;
    v.id = mask_id;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.tag = Tag::Num;
    v.num = x;
    return v;
  }
  static Value payload(uint64_t pid, bool active) {
    Value v;
    v.tag = Tag::Num;
    v.flags = F_VARYING | (active ? F_ACTIVE : 0);
    v.id = pid;
    return v;
  }
  static Value symbol(uint64_t sym) {
    Value v;
    v.tag = Tag::Sym;
    v.id = sym;
    return v;
  }
  static Value pair(uint64_t pid) {
    Value v;
    v.tag = Tag::Pair;
    v.id = pid;
    return v;
  }
  static Value prim(uint32_t prim_id) {
    Value v;
    v.tag = Tag::Prim;
    v.cols = prim_id;
    return v;
  }
  static Value closure(const Closure* c) {
    Value v;
    v.tag = Tag::Closure;
    v.ptr = c;
    return v;
  }
  static Value vec(uint64_t start, uint32_t n) {
    Value v;
    v.tag = Tag::Vec;
    v.id = start;
    v.cols = n;
    return v;
  }
  static Value mat(uint64_t start, uint16_t r, uint32_t c) {
    Value v;
    v.tag = Tag::Mat;
    v.id = start;
    v.rows = r;
    v.cols = c;
    return v;
  }

  bool is_num() const { return tag == Tag::Num; }
  bool varying() const { return flags & F_VARYING; }
  bool active() const { return flags & F_ACTIVE; }
  bool uniform_num() const { return tag == Tag::Num && !(flags & F_VARYING); }
  bool is_false() const { return tag == Tag::Bool && !(flags & F_VARYING) && num == 0.0; }
  uint32_t size() const { return tag == Tag::Mat ? uint32_t(rows) * cols : cols; }
};

inline const char* tag_name(Tag t) {
  switch (t) {
    case Tag::Nil: return "the empty list";
    case Tag::Bool: return "a boolean";
    case Tag::Num: return "a number";
    case Tag::Sym: return "a symbol";
    case Tag::Pair: return "a pair";
    case Tag::Closure: return "a procedure";
    case Tag::Prim: return "a primitive procedure";
    case Tag::Vec: return "a vector";
    case Tag::Mat: return "a matrix";
    case Tag::Unspec: return "an unspecified value";
  }
  return "a value";
}

}  // namespace ndvm

// splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit over the
// output (the search's source digests, seen.hpp, and the simplifier's content hashes); FNV-1a for
// the short names of the reader's and the expander's tables.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ndvm {

inline uint64_t splitmix64_finalize(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

// FNV-1a of a name, folded to a size_t (tables mask its low bits). A name is a few characters:
// one multiply a character is cheaper than a general-purpose hash's setup.
// (In steps for a scanner that hashes a name as it reads it: start from kNameHashStart, one step
// a character, name_hash_end of the last.)
constexpr uint64_t kNameHashStart = 0xcbf29ce484222325ULL;
inline uint64_t name_hash_step(uint64_t h, char c) {
  return (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
}
inline size_t name_hash_end(uint64_t h) { return size_t(h ^ (h >> 32)); }
inline size_t name_hash(std::string_view s) {
  uint64_t h = kNameHashStart;
  for (char c : s) h = name_hash_step(h, c);
  return name_hash_end(h);
}

}  // namespace ndvm

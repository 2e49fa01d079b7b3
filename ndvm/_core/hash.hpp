// splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit over the
// output (the search's source digests, seen.hpp, and the simplifier's content hashes).
#pragma once
#include <cstdint>

namespace ndvm {

inline uint64_t splitmix64_finalize(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace ndvm

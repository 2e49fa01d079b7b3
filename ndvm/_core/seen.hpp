// The 64-bit digest that names a search's sources (seen.pxi): the same digest for the same text in
// every process and on every machine (its bytes read little-endian), each 8-byte block folded in
// through splitmix64's finalizer (a bijection: two texts of one length that differ in one block
// never collide; any two others collide with a chance of about 2**-64).
#pragma once
#include <cstddef>
#include <cstdint>

#include "hash.hpp"

namespace ndvm::seen {

using ndvm::splitmix64_finalize;

inline uint64_t digest(const char* text, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(text);
  uint64_t h = splitmix64_finalize(0x9e3779b97f4a7c15ULL + n);
  size_t k = 0;
  for (;;) {
    uint64_t word = 0;
    size_t take = n - k < 8 ? n - k : 8;
    for (size_t b = 0; b < take; ++b) word |= static_cast<uint64_t>(p[k + b]) << (8 * b);
    h = splitmix64_finalize(h ^ word) + 0x9e3779b97f4a7c15ULL;
    k += take;
    if (k >= n) return h;
  }
}

}  // namespace ndvm::seen

// The 64-bit digest that names a search's sources (seen.pxi): the same digest for the same text in
// every process and on every machine (its bytes read little-endian), each 8-byte block folded in
// through splitmix64's finalizer (a bijection: two texts of one length that differ in one block
// never collide; any two others collide with a chance of about 2**-64).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (take == 8)  // (a whole block is its bytes read little-endian: one load, not eight)
      std::memcpy(&word, p + k, 8);
    else
#endif
      for (size_t b = 0; b < take; ++b) word |= static_cast<uint64_t>(p[k + b]) << (8 * b);
    h = splitmix64_finalize(h ^ word) + 0x9e3779b97f4a7c15ULL;
    k += take;
    if (k >= n) return h;
  }
}

// A set of digests in one flat table (open addressing, linear probing, at most half full): an
// insert or a lookup touches a slot or two of one array, and the digests of an island's Seen,
// which travel with it every epoch, are read out and put back in one pass each, with no node
// allocated per digest. Digests are well spread already (splitmix64's output), so a digest's
// low bits pick its slot. The empty slot is 0; the digest 0 is held by a flag instead.
class DigestSet {
 public:
  // Adds ``d``; false when it was there already.
  bool insert(uint64_t d) {
    if (d == 0) {
      bool fresh = !zero_;
      zero_ = true;
      return fresh;
    }
    if (2 * (filled_ + 1) > slots_.size()) grow(slots_.empty() ? kFirst : 2 * slots_.size());
    size_t mask = slots_.size() - 1;
    for (size_t k = d & mask;; k = (k + 1) & mask) {
      if (slots_[k] == d) return false;
      if (slots_[k] == 0) {
        slots_[k] = d;
        ++filled_;
        return true;
      }
    }
  }

  bool contains(uint64_t d) const {
    if (d == 0) return zero_;
    if (slots_.empty()) return false;
    size_t mask = slots_.size() - 1;
    for (size_t k = d & mask;; k = (k + 1) & mask) {
      if (slots_[k] == d) return true;
      if (slots_[k] == 0) return false;
    }
  }

  size_t size() const { return filled_ + (zero_ ? 1 : 0); }

  // The set's travelling form: 8 bytes a digest, in the machine's byte order, in the table's
  // order; ``out`` has room for size() of them.
  void pack(unsigned char* out) const {
    if (zero_) out = put(out, 0);
    for (uint64_t d : slots_)
      if (d != 0) out = put(out, d);
  }

  // Adds the ``n`` digests ``pack`` wrote at ``in``, growing the table once.
  void unpack(const unsigned char* in, size_t n) {
    size_t want = kFirst;
    while (want < 2 * (size() + n)) want *= 2;
    if (want > slots_.size()) grow(want);
    for (size_t k = 0; k < n; ++k) {
      uint64_t d;
      std::memcpy(&d, in + 8 * k, 8);
      insert(d);
    }
  }

 private:
  static constexpr size_t kFirst = 64;

  static unsigned char* put(unsigned char* out, uint64_t d) {
    std::memcpy(out, &d, 8);
    return out + 8;
  }

  void grow(size_t n) {
    std::vector<uint64_t> old(n, 0);
    old.swap(slots_);
    size_t mask = n - 1;
    for (uint64_t d : old) {
      if (d == 0) continue;
      size_t k = d & mask;
      while (slots_[k] != 0) k = (k + 1) & mask;
      slots_[k] = d;
    }
  }

  std::vector<uint64_t> slots_;
  size_t filled_ = 0;  // digests in slots_ (not the flagged 0)
  bool zero_ = false;
};

}  // namespace ndvm::seen

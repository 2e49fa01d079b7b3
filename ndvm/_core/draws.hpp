// numpy's scalar draws repeated on a BitGenerator (numpy/random/bitgen.h's bitgen_t or any struct
// with its next_uint32/next_double members and state): the same numbers from the same state, so
// the Draws class (draws.pxi) and the genetic operators (breed.pxi) share numpy's stream.
#pragma once
#include <cstdint>

namespace ndvm::draws {

// numpy's bounded draw of one value in [0, span] for a span below 2**32 - 1 (no buffer carried
// between calls): none drawn for an empty span, else Lemire's multiply-and-reject on 32-bit draws.
template <class BitGen>
inline uint32_t bounded32(BitGen* bg, uint32_t span) {
  if (span == 0) return 0;
  const uint32_t excl = span + 1;
  uint64_t m = static_cast<uint64_t>(bg->next_uint32(bg->state)) * excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - span) % excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(bg->next_uint32(bg->state)) * excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// Generator.uniform(low, high): numpy's low + (high - low) * next_double, the product rounded
// before the sum (volatile: never fused into one multiply-add, which numpy's build does not do).
template <class BitGen>
inline double uniform(BitGen* bg, double low, double high) {
  volatile double scaled = (high - low) * bg->next_double(bg->state);
  return low + scaled;
}

}  // namespace ndvm::draws

// Numeric rules of the genetic operators (breed.pxi) that Python's builtins defined: the literals
// a mutation writes are Python's round(x, n), correctly rounded half-even on the exact decimal
// value of the double, as the operators wrote them in Python.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ndvm::breed {

// Python's round(x, ndigits) of a float for 0 <= ndigits <= 17: glibc's printf writes the exact
// binary value rounded half-even to ndigits decimals (as CPython's dtoa mode 3 does) and strtod
// reads that decimal back correctly rounded (as CPython does). Infinities and NaN come back as
// they are; a negative value rounded to zero keeps its sign (-0.0), as in Python.
inline double python_round(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  char text[400];  // (DBL_MAX has 309 integer digits)
  std::snprintf(text, sizeof text, "%.*f", ndigits, x);
  return std::strtod(text, nullptr);
}

}  // namespace ndvm::breed

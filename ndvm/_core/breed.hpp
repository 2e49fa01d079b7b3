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
//
// The operators' literals (|x| < 1e6, ndigits <= 8) are rounded without text: the exact product
// x 10^ndigits is hi + lo (an fma), its integer part and the exact side of the half (Sterbenz:
// hi - m is exact when it decides the sign) give the decimal n, and n / 10^ndigits, a quotient of
// two exact doubles, is the double nearest n 10^-ndigits, as strtod reads it.
inline double python_round(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  static const double scale[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
  double a = std::fabs(x);
  if (ndigits >= 0 && ndigits <= 8 && a < 1e6) {
    double s = scale[ndigits], hi = a * s, lo = std::fma(a, s, -hi);
    double n = std::floor(hi);
    if (hi == n && lo < 0) n -= 1;  // (the exact product just below an integer)
    double m = n + 0.5, side = (hi - m) + lo;
    if (side > 0 || (side == 0 && std::fmod(n, 2.0) != 0)) n += 1;  // (a tie: to even)
    return std::copysign(n / s, x);
  }
  char text[400];  // (DBL_MAX has 309 integer digits)
  std::snprintf(text, sizeof text, "%.*f", ndigits, x);
  return std::strtod(text, nullptr);
}

}  // namespace ndvm::breed

// The reader. A hand-written recursive-descent scanner over the text; nesting is bounded
// (kMaxNesting) so a pathological input raises ReadError instead of exhausting the native stack.
#include "reader.hpp"
#include "hash.hpp"
#include "stack.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ndvm {

namespace {

constexpr int kMaxNesting = 10000;

// What skip_space makes of a character: a space, a line comment's ';', a '#' (a block comment's
// start when '|' follows) or the end of the spaces (everything else: one lookup decides).
enum class Gap : uint8_t { End, Space, Semicolon, Hash };

// The characters that end an atom, and what each is between datums, as tables: the reader asks
// about every character of the text.
struct CharClasses {
  bool delimiter[256] = {};
  Gap gap[256] = {};
  constexpr CharClasses() {
    for (unsigned char c : "()[]';\"") delimiter[c] = true;
    for (unsigned char c : " \t\n\r\f\v") {
      delimiter[c] = true;
      gap[c] = Gap::Space;
    }
    delimiter[0] = false;  // (the string literals' terminator; a NUL is neither)
    gap[0] = Gap::End;
    gap[static_cast<unsigned char>(';')] = Gap::Semicolon;
    gap[static_cast<unsigned char>('#')] = Gap::Hash;
  }
};
constexpr CharClasses kChars;

bool is_delimiter(char c) { return kChars.delimiter[static_cast<unsigned char>(c)]; }
Gap gap_of(char c) { return kChars.gap[static_cast<unsigned char>(c)]; }

// The items of the lists a read is reading: one vector a thread, which its reads reuse (a
// vector of each read's was one allocation a candidate), given back after a read of a text with
// more than kKeptItems items open at once. (No read starts while another runs on the thread.)
constexpr size_t kKeptItems = 4096;
std::vector<int32_t>& thread_items() {
  static thread_local std::vector<int32_t> items;
  return items;
}

class Reader {
 public:
  Reader(Source& src, std::string_view text)
      : s_(src), p_(text.data()), n_(text.size()), items_(thread_items()),
        stack_limit_(native_stack_limit()) {
    items_.clear();  // (a read that raised left its items)
  }
  ~Reader() {
    if (items_.capacity() > kKeptItems) std::vector<int32_t>().swap(items_);
  }

  void read_all() {
    // (a datum takes at least one character: room for all of them, allocated once)
    s_.data_.reserve(n_ / 2 + 4);
    s_.kids_.reserve(n_ / 2 + 4);
    s_.symbols_.reserve(16);
    s_.symhash_.reserve(16);
    if (n_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0)  // (a byte-order mark first: as files)
      i_ = 3;
    skip_space();
    while (i_ < n_) {
      if (p_[i_] == ')' || p_[i_] == ']')
        fail("unexpected '" + std::string(1, p_[i_]) + "' with no matching opening bracket");
      s_.top_.push_back(read_item(0));  // (at the datum: the spaces are skipped)
      skip_space();
    }
    if (s_.top_.empty()) throw Error(ErrorKind::Read, "empty program: no expression to evaluate",
                                     SrcPos{line_, col_});
  }

 private:
  Source& s_;
  const char* const p_;  // the text's characters (NUL-terminated) and their count, held: the
  const size_t n_;       // scanner reads them for every character
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
  std::vector<int32_t>& items_;  // the items of the lists being read, innermost last
  const char* stack_limit_;     // (native_stack_limit(), looked up once: it is thread-local)

  [[noreturn]] void fail(const std::string& msg) {
    throw Error(ErrorKind::Read, msg, SrcPos{line_, col_});
  }
  [[noreturn]] void fail_at(const std::string& msg, SrcPos p) {
    throw Error(ErrorKind::Read, msg, p);
  }

  // A control character (a NUL, say) or an invisible one (a zero-width space, a byte-order
  // mark) inside a name is refused where it is: it would make a name that prints like another
  // (`a<NUL>b` shows as `a b`), and is a damaged file or a paste far more often than intended.
  void check_visible() {
    const auto c = static_cast<unsigned char>(p_[i_]);
    char code[16];
    if (c < 0x20 || c == 0x7F) {
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
      fail(std::string("a control character (") + code + ") in a name: is the file damaged?");
    }
    if (c == 0xC2 && i_ + 1 < n_ && static_cast<unsigned char>(p_[i_ + 1]) == 0xA0)
      fail("a no-break space (U+00A0) in a name: a space pasted from a document? type a plain "
           "space");
    if (c != 0xE2 && c != 0xE3 && c != 0xEF) return;
    if (i_ + 2 >= n_) return;
    const auto c1 = static_cast<unsigned char>(p_[i_ + 1]);
    const auto c2 = static_cast<unsigned char>(p_[i_ + 2]);
    unsigned space = 0;  // (U+2000..U+200A, U+202F, U+205F, U+3000: spaces that are not ' ')
    if (c == 0xE2 && c1 == 0x80 && (c2 <= 0x8A || c2 == 0xAF)) space = 0x2000 + (c2 - 0x80);
    else if (c == 0xE2 && c1 == 0x81 && c2 == 0x9F) space = 0x205F;
    else if (c == 0xE3 && c1 == 0x80 && c2 == 0x80) space = 0x3000;
    if (space) {
      std::snprintf(code, sizeof code, "U+%04X", space);
      fail(std::string("a Unicode space (") + code + ") in a name: type a plain space");
    }
    unsigned cp = 0;
    if (c == 0xE2 && c1 == 0x80 && c2 >= 0x8B && c2 <= 0x8F) cp = 0x2000 + (c2 - 0x80);
    else if (c == 0xE2 && c1 == 0x81 && c2 == 0xA0) cp = 0x2060;
    else if (c == 0xEF && c1 == 0xBB && c2 == 0xBF) cp = 0xFEFF;
    if (cp == 0) return;
    std::snprintf(code, sizeof code, "U+%04X", cp);
    fail(std::string("an invisible character (") + code +
         ", a zero-width space or joiner, or a byte-order mark) in a name: retype the name");
  }

  void advance() {
    if (p_[i_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++i_;
  }

  void skip_space() {
    while (i_ < n_) {
      const Gap g = gap_of(p_[i_]);  // (one lookup: most calls stop at the first character)
      if (g == Gap::End) break;
      if (g == Gap::Space) {
        advance();
      } else if (g == Gap::Semicolon) {
        while (i_ < n_ && p_[i_] != '\n') advance();
      } else if (i_ + 1 < n_ && p_[i_ + 1] == '|') {  // ('#': a block comment's start)
        SrcPos start{line_, col_};
        advance();
        advance();
        int depth = 1;
        while (depth > 0) {
          if (i_ >= n_) fail_at("unterminated block comment '#|'", start);
          if (p_[i_] == '|' && i_ + 1 < n_ && p_[i_ + 1] == '#') {
            advance();
            advance();
            --depth;
          } else if (p_[i_] == '#' && i_ + 1 < n_ && p_[i_ + 1] == '|') {
            advance();
            advance();
            ++depth;
          } else {
            advance();
          }
        }
      } else {
        break;
      }
    }
  }

  int32_t push(Datum d) {
    s_.data_.push_back(d);
    return static_cast<int32_t>(s_.data_.size() - 1);
  }

  // The list of the items_ from `mark` on (they leave items_).
  int32_t make_list(size_t mark, SrcPos pos, bool dotted) {
    Datum d;
    d.kind = DatumKind::List;
    d.pos = pos;
    d.dotted = dotted;
    d.first = static_cast<int32_t>(s_.kids_.size());
    d.count = static_cast<int32_t>(items_.size() - mark);
    s_.kids_.insert(s_.kids_.end(), items_.begin() + mark, items_.end());
    items_.resize(mark);
    return push(d);
  }

  int32_t make_symbol(std::string_view name, SrcPos pos) {
    return make_symbol(name, name_hash(name), pos);
  }
  int32_t make_symbol(std::string_view name, size_t hash, SrcPos pos) {
    Datum d;
    d.kind = DatumKind::Sym;
    d.sym = s_.intern(name, hash);
    d.pos = pos;
    return push(d);
  }

  // The datum after the spaces at i_, `depth` lists and quotes deep.
  int32_t read_datum(int depth) {
    enter(depth);
    skip_space();
    return read_at(depth);
  }

  // The datum at i_ (no space before it: a list's items and the top level skip the spaces
  // first, to see what follows them, and are not skipped again).
  int32_t read_item(int depth) {
    enter(depth);
    return read_at(depth);
  }

  // A datum `depth` deep may be read (the nesting checks, before its spaces are skipped).
  void enter(int depth) {
    if (depth > kMaxNesting)
      fail("nesting deeper than " + std::to_string(kMaxNesting) + " levels");
    if (native_stack_exhausted(stack_limit_)) fail("nesting too deep for the native stack");
  }

  // The datum at i_, its spaces skipped and its nesting checked.
  int32_t read_at(int depth) {
    if (i_ >= n_) fail("unexpected end of input: expected an expression");
    SrcPos pos{line_, col_};
    char c = p_[i_];
    if (c == '(' || c == '[') {
      char close = c == '(' ? ')' : ']';
      advance();
      const size_t mark = items_.size();
      if (c == '[') items_.push_back(make_symbol("vec", pos));
      bool dotted = false;
      for (;;) {
        skip_space();
        if (i_ >= n_)
          fail_at(std::string("unbalanced '") + c + "': missing '" + close + "'", pos);
        char d = p_[i_];
        if (d == ')' || d == ']') {
          if (d != close)
            fail(std::string("mismatched bracket: '") + c + "' at " + std::to_string(pos.line) +
                 ":" + std::to_string(pos.col) + " closed by '" + d + "'");
          advance();
          break;
        }
        if (dotted) fail("expected ')' after the tail of a dotted list");
        if (d == '.' && i_ + 1 < n_ && is_delimiter(p_[i_ + 1]) && c == '(') {
          if (items_.size() == mark) fail("'.' must follow at least one list element");
          advance();
          int32_t tail = read_datum(depth + 1);
          items_.push_back(tail);
          dotted = true;
          continue;
        }
        // (it may grow items_: pushed after; an atom read here, not through read_at's
        // dispatch, which would ask again what it starts with)
        enter(depth + 1);
        int32_t item = kChars.delimiter[static_cast<unsigned char>(d)] ? read_at(depth + 1)
                                                                        : read_atom();
        items_.push_back(item);
      }
      return make_list(mark, pos, dotted);
    }
    if (c == ')' || c == ']') fail(std::string("unexpected '") + c + "'");
    if (c == '\'') {
      advance();
      const size_t mark = items_.size();
      int32_t quote = make_symbol("quote", pos);
      int32_t quoted = read_datum(depth + 1);
      items_.push_back(quote);
      items_.push_back(quoted);
      return make_list(mark, pos, false);
    }
    if (c == '"') fail("strings are not part of the language");
    return read_atom();
  }

  // The atom at i_ (its first character no delimiter): a boolean, a number or a symbol.
  int32_t read_atom() {
    const SrcPos pos{line_, col_};
    // (no newline in it: it stays on its line)
    // (scanned in locals, written back once: i_ and col_ are kept up to date for check_visible,
    // which reports where it stops)
    // (hashed as it is scanned, for a name's interning)
    const size_t start = i_;
    const int col0 = col_;
    size_t i = start;
    uint64_t hash = kNameHashStart;
    while (i < n_ && !is_delimiter(p_[i])) {
      const auto b = static_cast<unsigned char>(p_[i]);
      hash = name_hash_step(hash, p_[i]);
      if (b < 0x20 || b >= 0x7F) {  // (printable ASCII needs no check)
        i_ = i;
        col_ = col0 + int(i - start);
        check_visible();
      }
      ++i;
    }
    i_ = i;
    col_ = col0 + int(i - start);
    // (a view into the text: no copy of the token, which is made a symbol's name once)
    const std::string_view tok(p_ + start, i_ - start);
    if (tok[0] == '#') {
      Datum d;
      d.kind = DatumKind::Bool;
      d.pos = pos;
      if (tok == "#t" || tok == "#true") {
        d.num = 1.0;
      } else if (tok == "#f" || tok == "#false") {
        d.num = 0.0;
      } else {
        fail_at("bad '#' syntax '" + std::string(tok) + "' (only #t and #f are supported)", pos);
      }
      return push(d);
    }
    if (tok == ".") fail_at("unexpected '.'", pos);
    if (!could_be_number(tok[0])) return make_symbol(tok, name_hash_end(hash), pos);
    double value;
    bool is_int;
    if (parse_number(tok, p_ + start, value, is_int)) {
      Datum d;
      d.kind = DatumKind::Num;
      d.num = value;
      d.is_int = is_int;
      d.pos = pos;
      return push(d);
    }
    if (number_like(tok)) {  // (1.5.2 and 1/3 were read as symbols: free names a fit fitted)
      if (tok.find('/') != std::string_view::npos)
        fail_at("'" + std::string(tok) + "' is not a number of the language (no rationals: write "
                "a decimal, or (/ 1 3))", pos);
      fail_at("malformed number '" + std::string(tok) + "'", pos);
    }
    return make_symbol(tok, name_hash_end(hash), pos);
  }

  // Whether a token starting with c may be a number or a malformed one: a sign, '.' or a digit
  // (parse_number and number_like refuse any other start: a name skips both).
  static bool could_be_number(char c) {
    return c == '+' || c == '-' || c == '.' || (c >= '0' && c <= '9');
  }

  // Whether a token is made as a number is ([+-], then a digit or '.' and a digit, then only
  // digits, '.', '/' and exponents: 1.5.2, 1e-5e, 1/3): such a token that is not a number is a
  // malformed one, never a symbol (1+ and 1x stay symbols).
  static bool number_like(std::string_view tok) {
    size_t k = 0, n = tok.size();
    if (k < n && (tok[k] == '+' || tok[k] == '-')) ++k;
    size_t first = k < n && tok[k] == '.' ? k + 1 : k;
    if (first >= n || !std::isdigit(static_cast<unsigned char>(tok[first]))) return false;
    for (; k < n; ++k) {
      char c = tok[k];
      bool exp_sign = (c == '+' || c == '-') && (tok[k - 1] == 'e' || tok[k - 1] == 'E');
      if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '/' && c != 'e' &&
          c != 'E' && !exp_sign)
        return false;
    }
    return true;
  }

  // A number is [+-] digits [. digits] [e [+-] digits], with at least one digit in the mantissa.
  // `at` is the token in the NUL-terminated text: strtod stops at the delimiter after it.
  static bool parse_number(std::string_view tok, const char* at, double& value, bool& is_int) {
    size_t k = 0, n = tok.size();
    if (k < n && (tok[k] == '+' || tok[k] == '-')) ++k;
    size_t digits = 0;
    bool frac = false, expo = false;
    while (k < n && std::isdigit(static_cast<unsigned char>(tok[k]))) ++k, ++digits;
    if (k < n && tok[k] == '.') {
      frac = true;
      ++k;
      while (k < n && std::isdigit(static_cast<unsigned char>(tok[k]))) ++k, ++digits;
    }
    if (digits == 0) return false;
    if (k < n && (tok[k] == 'e' || tok[k] == 'E')) {
      expo = true;
      ++k;
      if (k < n && (tok[k] == '+' || tok[k] == '-')) ++k;
      size_t ed = 0;
      while (k < n && std::isdigit(static_cast<unsigned char>(tok[k]))) ++k, ++ed;
      if (ed == 0) return false;
    }
    if (k != n) return false;
    is_int = !frac && !expo;
    if (is_int && digits <= 15) {  // (exact as an integer below 2^53: what strtod gives)
      int64_t whole = 0;
      for (size_t j = n - digits; j < n; ++j) whole = 10 * whole + (tok[j] - '0');
      value = tok[0] == '-' ? -double(whole) : double(whole);  // ("-0" is -0.0, as strtod's)
      return true;
    }
    value = std::strtod(at, nullptr);  // overflow gives +-inf, as IEEE reals do
    return true;
  }
};

}  // namespace

size_t Source::symbol_slot(std::string_view s, size_t hash) const {
  // (names are a few characters: compared in place, not by a call to memcmp)
  auto same = [&](const std::string& t) {
    if (t.size() != s.size()) return false;
    for (size_t k = 0; k < s.size(); ++k)
      if (t[k] != s[k]) return false;
    return true;
  };
  const size_t mask = symindex_.size() - 1;
  size_t i = hash & mask;
  while (symindex_[i] >= 0 && !same(symbols_[size_t(symindex_[i])])) i = (i + 1) & mask;
  return i;
}

void Source::reindex(size_t slots) {
  symindex_.assign(slots, -1);
  for (size_t k = 0; k < symbols_.size(); ++k)
    symindex_[symbol_slot(symbols_[k], symhash_[k])] = int32_t(k);
}

int32_t Source::intern(std::string_view s) { return intern(s, name_hash(s)); }

int32_t Source::intern(std::string_view s, size_t hash) {
  if (symindex_.empty()) reindex(32);  // (room for a candidate's names without a regrowth)
  const size_t i = symbol_slot(s, hash);
  if (symindex_[i] >= 0) return symindex_[i];
  const auto id = static_cast<int32_t>(symbols_.size());
  symbols_.emplace_back(s);
  symhash_.push_back(hash);
  symindex_[i] = id;
  if (2 * symbols_.size() > symindex_.size()) reindex(2 * symindex_.size());
  return id;
}

int32_t Source::find_symbol(std::string_view s) const {
  return symindex_.empty() ? -1 : symindex_[symbol_slot(s, name_hash(s))];
}

std::string format_number(double x) {
  if (std::isnan(x)) return "+nan.0";
  if (std::isinf(x)) return x > 0 ? "+inf.0" : "-inf.0";
  char buf[64];
  if (x == std::floor(x) && std::fabs(x) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", x);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", x);
    // use the shortest representation that reads back exactly
    for (int p = 1; p <= 17; ++p) {
      char b2[64];
      std::snprintf(b2, sizeof b2, "%.*g", p, x);
      if (std::strtod(b2, nullptr) == x) {
        std::memcpy(buf, b2, sizeof b2);
        break;
      }
    }
  }
  return buf;
}

void Source::show_into(int32_t i, std::string& out, size_t max_len) const {
  if (out.size() > max_len) return;
  const Datum& d = data_[i];
  switch (d.kind) {
    case DatumKind::Num:
      if (d.is_int) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.0f", d.num);
        out += buf;
      } else {
        out += format_number(d.num);
      }
      break;
    case DatumKind::Bool: out += d.num != 0 ? "#t" : "#f"; break;
    case DatumKind::Sym: out += symbols_[d.sym]; break;
    case DatumKind::List:
      out += '(';
      for (int k = 0; k < d.count; ++k) {
        if (k) out += ' ';
        if (d.dotted && k == d.count - 1) out += ". ";
        show_into(kids_[d.first + k], out, max_len);
        if (out.size() > max_len) return;
      }
      out += ')';
      break;
  }
}

std::string Source::show(int32_t i, size_t max_len) const {
  std::string out;
  show_into(i, out, max_len);
  if (out.size() > max_len) {
    out.resize(max_len);
    out += "...";
  }
  return out;
}

std::shared_ptr<Source> read_source(std::string_view text, const std::string& name) {
  auto src = std::make_shared<Source>();
  read_into(*src, text, name);
  return src;
}

void read_into(Source& src, std::string_view text, const std::string& name) {
  NDVM_ASSERT(text.data()[text.size()] == '\0');
  src.name_ = name;
  try {
    Reader r(src, text);
    r.read_all();
  } catch (Error& e) {
    e.file_ = name;
    throw;
  }
}

}  // namespace ndvm

// bench/check_parse.py's native dump: reads texts (each as "<bytes>\n" then the bytes), expands
// each with expand_program as the core's parse does (the name "<check>") and prints everything
// that comes out, one line a text: the Source (its datums, lists, top level, symbols), every node
// reachable from the root and the result (in depth-first order, each with all its fields, its
// kids, slots and loop as node numbers and its position), the free names with theirs and
// bounded_; or the error (kind, message, line, col, form, file, backtrace) as guarded() fills it.
// Compiled by check_parse.py against a source tree's reader and expander (an old and a new one):
// the lines of the two must be the same.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.hpp"
#include "error.hpp"

namespace {

// Text as printable ASCII: '\\', '|' and anything outside ' '..'~' escaped as \xHH.
std::string esc(const std::string& s) {
  std::string out;
  char buf[8];
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7F || c == '\\' || c == '|') {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, b);
  return buf;
}

void dump_source(const ndvm::Source& s, std::string& out) {
  out += "src " + esc(s.name_) + " data";
  for (const ndvm::Datum& d : s.data_) {
    char buf[160];
    std::snprintf(buf, sizeof buf, " %d/%d/%d/%d/%s/%d/%d@%d:%d", int(d.kind), int(d.is_int),
                  int(d.dotted), d.sym, bits(d.num).c_str(), d.first, d.count, d.pos.line,
                  d.pos.col);
    out += buf;
  }
  out += " kids";
  for (int32_t k : s.kids_) out += " " + std::to_string(k);
  out += " top";
  for (int32_t k : s.top_) out += " " + std::to_string(k);
  out += " symbols";
  for (const std::string& n : s.symbols_) out += " " + esc(n);
}

void number(const ndvm::Node* n, std::unordered_map<const ndvm::Node*, int>& ids,
            std::vector<const ndvm::Node*>& order) {
  if (!n || ids.count(n)) return;
  ids[n] = int(order.size());
  order.push_back(n);
  for (const ndvm::Node* k : n->kids) number(k, ids, order);
}

void dump(const ndvm::Expanded& x, std::string& out) {
  dump_source(x.src_, out);
  std::unordered_map<const ndvm::Node*, int> ids;
  std::vector<const ndvm::Node*> order;
  number(x.root_, ids, order);
  number(x.result_, ids, order);
  auto id = [&](const ndvm::Node* n) { return n ? std::to_string(ids.at(n)) : std::string("-"); };
  out += " | nodes";
  for (const ndvm::Node* n : order) {
    char buf[200];
    std::snprintf(buf, sizeof buf, " [%d r%d c%d d%u s%u p%u f%u v%d/%d/%d/%" PRIx64 " #%d %s",
                  int(n->kind), int(n->rest), int(n->captures), n->depth, n->slot, n->nparams,
                  n->frame_size, int(n->constant.tag), int(n->constant.flags),
                  int(n->constant.rows), n->constant.id, n->datum,
                  n->src == &x.src_ ? "U" : n->src == x.prelude_.get() ? "P" : "?");
    out += buf;
    const ndvm::SrcPos p = n->pos();
    out += " @" + std::to_string(p.line) + ":" + std::to_string(p.col);
    out += " cols" + std::to_string(n->constant.cols);
    out += " loop" + id(n->loop) + " kids";
    for (const ndvm::Node* k : n->kids) out += " " + id(k);
    out += " slots";
    for (uint32_t s : n->slots) out += " " + std::to_string(s);
    out += " name " + esc(std::string(n->name)) + "]";
  }
  out += " | root " + id(x.root_) + " result " + id(x.result_) + " free";
  for (const ndvm::FreeName& f : x.free_)
    out += " " + esc(f.name) + "@" + std::to_string(f.pos.line) + ":" + std::to_string(f.pos.col);
  out += " | bounded " + std::to_string(int(x.bounded_));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TEXTS (each as \"<bytes>\\n\" then the bytes)\n", argv[0]);
    return 2;
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) return 2;
  const std::string name = "<check>";
  size_t size;
  while (std::fscanf(f, "%zu", &size) == 1) {
    std::fgetc(f);  // (the newline after the size)
    std::string text(size, '\0');
    if (size && std::fread(&text[0], 1, size, f) != size) return 2;
    std::shared_ptr<const ndvm::Expanded> x;
    ndvm::ErrorInfo err;
    std::string out;
    if (ndvm::guarded(err, [&] { x = ndvm::expand_program(text, name); })) {
      dump(*x, out);
    } else {
      out = "error " + std::to_string(err.kind) + " " + std::to_string(err.line) + ":" +
            std::to_string(err.col) + " | " + esc(err.message) + " | " + esc(err.form) + " | " +
            esc(err.file) + " | " + esc(err.backtrace);
    }
    std::fputs(out.c_str(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

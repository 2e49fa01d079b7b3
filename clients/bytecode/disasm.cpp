// The disassembler: a Chunk as text, one instruction a line (pc, source line:col, opcode,
// operands, a note naming what the operands refer to), each function under a header; and the
// opcodes' names and one-line docs, generated from the one opcode table in chunk.hpp.
#include <algorithm>
#include <cstdio>

#include "chunk.hpp"
#include "prims.hpp"

namespace ndvm::bytecode {

const char* opcode_name(int op) {
  static const char* names[] = {
#define NDVM_BC_NAME(name, doc) #name,
      NDVM_BC_OPCODES(NDVM_BC_NAME)
#undef NDVM_BC_NAME
  };
  return op >= 0 && op < OP_COUNT ? names[op] : "?";
}

const char* opcode_doc(int op) {
  static const char* docs[] = {
#define NDVM_BC_DOC(name, doc) doc,
      NDVM_BC_OPCODES(NDVM_BC_DOC)
#undef NDVM_BC_DOC
  };
  return op >= 0 && op < OP_COUNT ? docs[op] : "";
}

namespace {

std::string pos_text(const Node* n) {
  SrcPos p = n->pos();
  return std::to_string(p.line) + ":" + std::to_string(p.col);
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

}  // namespace

std::string disassemble(const Chunk& c) {
  // protos in entry order, so each function's code is listed under its header
  std::vector<std::pair<uint32_t, size_t>> starts;
  for (size_t i = 0; i < c.protos.size(); ++i) starts.emplace_back(c.protos[i].entry, i);
  std::sort(starts.begin(), starts.end());
  std::string out =
      "; columns: pc, line:col of the source form ('|' = as above), opcode, operands "
      "('-> N' jumps to pc N),\n;          '; ' the source form or callee, '+N' steps "
      "charged\n";
  size_t next = 0;
  std::string last_pos;
  const Source* last_src = nullptr;
  for (uint32_t pc = 0; pc < c.code.size(); ++pc) {
    if (pc == 0 && (starts.empty() || starts[0].first != 0))
      out += "== shared return (the target of '-> return' in tail position) ==\n";
    while (next < starts.size() && starts[next].first == pc) {
      const Proto& p = c.protos[starts[next].second];
      out += "== " + p.name + " (" + p.node->src->name_ + ":" + pos_text(p.node) + ", " +
             std::to_string(p.nparams) + (p.rest ? "+rest" : "") + " params, frame " +
             std::to_string(p.frame_size) + ", stack " + std::to_string(p.max_stack) + ") ==\n";
      last_pos.clear();
      ++next;
    }
    const Instr& i = c.code[pc];
    const Node* n = c.lines[pc];
    char num[16];
    std::snprintf(num, sizeof num, "%04u ", pc);
    std::string line = num;
    std::string pos = pos_text(n);
    line += pad(pos == last_pos && n->src == last_src ? "   |" : pos, 8);
    last_pos = pos;
    last_src = n->src;
    line += pad(opcode_name(i.op), 14);
    std::string ops, note;
    switch (Opcode(i.op)) {
      case OP_CONST:
        ops = std::to_string(i.a);
        note = c.constants[i.a].tag == Tag::Unspec ? "unspecified" : n->form();
        break;
      case OP_QUOTE: note = n->form(); break;
      case OP_LOCAL:
      case OP_LOCAL_CHECKED:
        ops = std::to_string(i.a) + " " + std::to_string(i.b);
        note = n->form();
        break;
      case OP_FREE: ops = std::to_string(i.a); note = c.program->free_[i.a].name; break;
      case OP_CLOSURE: ops = std::to_string(i.a); note = c.protos[i.a].name; break;
      case OP_BIND:
      case OP_UNASSIGNED: ops = std::to_string(i.a) + " " + std::to_string(i.b); break;
      case OP_SET: ops = std::to_string(i.b); break;
      case OP_IF:
        ops = "-> " + std::to_string(i.b);
        note = i.c ? "mixed -> " + std::to_string(i.c) : "mixed -> return";
        break;
      case OP_AND:
      case OP_OR: ops = i.c ? "-> " + std::to_string(i.c) : "-> return"; break;
      case OP_JUMP: ops = "-> " + std::to_string(i.b); break;
      case OP_PRIM:
        ops = std::to_string(i.a) + " " + std::to_string(i.b);
        note = prim_info(int(i.b)).name;
        break;
      case OP_CALL:
      case OP_TAIL_CALL: ops = std::to_string(i.a); note = n->kids[0]->form(); break;
      case OP_LOOP:
      case OP_RECUR: {
        const LoopInfo& l = c.loops[i.a];
        ops = std::to_string(i.a);
        note = std::to_string(l.nvars) + " vars, frame " + std::to_string(l.frame_size) +
               ", body " + std::to_string(l.body) + (l.captures ? ", captured" : "");
        break;
      }
      case OP_TICK: ops = std::to_string(i.a); break;
      default: break;
    }
    line += pad(ops, 10);
    if (i.ticks) note = (note.empty() ? "" : note + "  ") + "+" + std::to_string(i.ticks);
    if (!note.empty()) line += "; " + note;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace ndvm::bytecode

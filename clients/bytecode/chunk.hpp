// The bytecode client's compiled form: one Chunk per program holding fixed-width instructions, a
// constant table, a line table (the expanded node each instruction came from: its line:col and
// form text, looked up only for errors and the disassembler), function prototypes and loop
// descriptors. A Chunk is immutable after compile() and shared read-only by every thread.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ast.hpp"

namespace ndvm::bytecode {

// The opcode table: name, operands, stack effect. "env" is the current activation's frame (a
// lambda's or a loop's; let and letrec slots are flattened into it), "sp" the value stack.
// Instructions whose code begins a node's evaluation carry that node's step ticks (Instr::ticks)
// so the step count matches dmci's one tick per evaluated node.
#define NDVM_BC_OPCODES(X)                                                                        \
  X(CONST, "push constants[a]                                   [] -> [k]")                       \
  X(QUOTE, "build the quoted list of this instruction's node    [] -> [list]")                    \
  X(LOCAL, "push slot b of the frame a levels up                [] -> [v]")                       \
  X(LOCAL_CHECKED, "LOCAL of a letrec slot: error if not yet assigned [] -> [v]")                 \
  X(FREE, "push free name a (parameter, data input or constant) [] -> [v]")                      \
  X(CLOSURE, "close function protos[a] over env                 [] -> [closure]")                 \
  X(POP, "drop the top value                                    [v] -> []")                       \
  X(BIND, "pop a values into env slots b .. b+a-1 (let)         [v1..va] -> []")                  \
  X(SET, "pop into env slot b (a letrec or define init)         [v] -> []")                       \
  X(UNASSIGNED, "mark env slots b .. b+a-1 not yet assigned (letrec entry)  [] -> []")            \
  X(IF, "pop test; false: jump b; mixed lanes: run both arms under masks, "                       \
        "push their select and jump c (c = 0: return it)     [t] -> []")                          \
  X(AND, "test the top: false: keep it, jump c; true: pop, fall into the second operand; "        \
         "mixed: select of both sides, jump c               [a] -> [a] | []")                     \
  X(OR, "like AND with the sides swapped: true keeps the top and jumps c  [a] -> [a] | []")       \
  X(JUMP, "jump to b                                            [] -> []")                        \
  X(PRIM, "call primitive b on the top a values                 [x1..xa] -> [r]")                 \
  X(CALL, "call the procedure under the top a arguments         [f x1..xa] -> [r]")               \
  X(TAIL_CALL, "CALL reusing the current activation (no native or VM stack growth) "              \
               "[f x1..xa] -> (returns)")                                                         \
  X(RETURN, "return the top value from the current activation   [v] -> (returns)")                \
  X(LOOP, "enter loops[a]: pop its initial values into a new loop frame  [v1..vn] -> []")         \
  X(RECUR, "pop the new values of loops[a] into its frame (reused when nothing captured it), "    \
           "jump to the loop body                            [v1..vn] -> []")                     \
  X(LOOP_EXIT, "leave the current loop frame (the loop's value stays on top)  [] -> []")          \
  X(TICK, "count a extra evaluation steps (a node nest too deep for Instr::ticks)  [] -> []")

enum Opcode : uint8_t {
#define NDVM_BC_ENUM(name, doc) OP_##name,
  NDVM_BC_OPCODES(NDVM_BC_ENUM)
#undef NDVM_BC_ENUM
  OP_COUNT
};

const char* opcode_name(int op);
const char* opcode_doc(int op);

struct Instr {
  uint8_t op = 0;
  uint8_t ticks = 0;  // evaluation steps counted when the instruction starts
  uint16_t unused = 0;
  uint32_t a = 0, b = 0, c = 0;
};

// A function: a Lambda node, or the program's top level (protos[0]).
struct Proto {
  uint32_t entry = 0;       // first instruction
  uint32_t nparams = 0;     // required parameters; the rest list (if any) follows them
  bool rest = false;
  uint32_t frame_size = 0;  // parameters plus every let/letrec slot flattened into the frame
  uint32_t max_stack = 0;   // value-stack slots the body needs at most
  const Node* node = nullptr;
  std::string name;
};

struct LoopInfo {
  uint32_t nvars = 0;       // loop variables (slots 0 .. nvars-1 of the loop frame)
  uint32_t frame_size = 0;  // loop variables plus the body's flattened let/letrec slots
  uint32_t body = 0;        // first instruction of the body (the target of RECUR)
  bool captures = false;    // a closure may capture the frame: never overwrite it in place
};

struct Chunk {
  std::vector<Instr> code;          // code[0] is a shared RETURN (the continuation "return it")
  std::vector<const Node*> lines;   // per instruction: its node (position and form for errors)
  // Looked up only when a limit is hit: the nodes whose evaluation step each instruction counts,
  // in order (tick_nodes[tick_at[pc] ...]), and for CALL the node that contains the call (dmci
  // reports a depth overflow there).
  std::vector<uint32_t> tick_at;
  std::vector<const Node*> tick_nodes;
  std::vector<const Node*> outer;
  std::vector<Value> constants;
  std::vector<Proto> protos;        // protos[0]: the top level
  std::vector<LoopInfo> loops;
  const Expanded* program = nullptr;
};

// Compiles an expanded program. Cheap: one pass over the tree plus a pass per nested lambda.
Chunk compile(const Expanded& x);

// A human-readable listing: one line per instruction with its line:col, operands and a comment.
std::string disassemble(const Chunk& c);

}  // namespace ndvm::bytecode

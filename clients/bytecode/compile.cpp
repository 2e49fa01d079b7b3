// The compiler: expanded tree (ast.hpp) -> Chunk (the disassembler is disasm.cpp). Every lambda and loop
// owns one runtime frame; the let and letrec scopes inside it get their own slots in that frame
// (never shared between scopes, so both arms of a mixed branch can run without clobbering each
// other), which turns the expander's (depth, slot) addresses into (frames up, flat slot).
#include <algorithm>
#include <deque>

#include "chunk.hpp"
#include "prims.hpp"

namespace ndvm::bytecode {

namespace {

// One expander scope (a Let, Letrec, Loop or Lambda node) and where its slots live at run time.
struct Scope {
  const Scope* parent = nullptr;
  uint32_t base = 0;         // first slot in the owning frame
  bool owner_start = false;  // the scope begins a runtime frame (lambda, loop, top level)
  bool letrec = false;       // slots may be read before assignment: loads are checked
};

struct Owner {
  uint32_t size = 0;  // slots allocated so far in this frame
};

struct LoopCtx {
  uint32_t index = 0;
  std::vector<uint32_t> exit_patches;  // instructions whose `c` is this loop's exit
};

// Where an expression's value goes. `tail`: it is the activation's result (the code returns it).
// `loop_tail`: it is the result of the innermost loop's body and flows to that loop's exit.
struct Ctx {
  const Scope* scope;
  Owner* owner;
  LoopCtx* loop;
  bool tail;
  bool loop_tail;
};

struct PendingLambda {
  const Node* node;
  const Scope* scope;  // the scope the lambda closes over
  uint32_t proto;
};

class Compiler {
 public:
  explicit Compiler(const Expanded& x) : x_(x) {}

  Chunk run() {
    c_.program = &x_;
    // code[0]: the shared "return the top value" continuation of branches in tail position
    emit(OP_RETURN, x_.root_);
    c_.protos.emplace_back();
    top_level();
    while (!work_.empty()) {
      PendingLambda p = work_.front();
      work_.pop_front();
      function(p);
    }
    return std::move(c_);
  }

 private:
  const Expanded& x_;
  Chunk c_;
  std::deque<Scope> scopes_;
  std::deque<Owner> owners_;
  std::deque<LoopCtx> loops_;
  std::deque<PendingLambda> work_;
  uint32_t pending_ticks_ = 0;
  std::vector<const Node*> pending_nodes_;  // the nodes of pending_ticks_, outermost first
  const Node* current_ = nullptr;           // the node being compiled (parent of the next one)
  int32_t depth_ = 0, max_depth_ = 0;

  // ---- emission -------------------------------------------------------------------------------
  uint32_t here() const { return uint32_t(c_.code.size()); }

  void tick(const Node* n) {
    ++pending_ticks_;
    pending_nodes_.push_back(n);
  }

  uint32_t emit(Opcode op, const Node* at, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0) {
    if (pending_ticks_ > 255) {
      Instr t;
      t.op = OP_TICK;
      t.a = pending_ticks_;
      pending_ticks_ = 0;
      push(t, at);
    }
    Instr i;
    i.op = op;
    i.ticks = uint8_t(pending_ticks_);
    i.a = a;
    i.b = b;
    i.c = c;
    pending_ticks_ = 0;
    push(i, at);
    return here() - 1;
  }
  void push(const Instr& i, const Node* at) {
    c_.code.push_back(i);
    c_.lines.push_back(at);
    c_.tick_at.push_back(uint32_t(c_.tick_nodes.size()));
    if (i.ticks || i.op == OP_TICK) {
      c_.tick_nodes.insert(c_.tick_nodes.end(), pending_nodes_.begin(), pending_nodes_.end());
      pending_nodes_.clear();
    }
    c_.outer.push_back(nullptr);
  }
  void stack(int32_t delta) {
    depth_ += delta;
    if (depth_ > max_depth_) max_depth_ = depth_;
  }
  void patch_b(uint32_t at, uint32_t target) { c_.code[at].b = target; }
  void patch_c(uint32_t at, uint32_t target) { c_.code[at].c = target; }

  uint32_t constant(const Value& v) {
    for (size_t i = 0; i < c_.constants.size(); ++i) {
      const Value& k = c_.constants[i];
      if (k.tag == v.tag && k.flags == v.flags && k.rows == v.rows && k.cols == v.cols &&
          k.id == v.id)
        return uint32_t(i);
    }
    c_.constants.push_back(v);
    return uint32_t(c_.constants.size() - 1);
  }

  const Scope* new_scope(const Scope* parent, uint32_t base, bool owner_start, bool letrec) {
    scopes_.emplace_back();
    Scope& s = scopes_.back();
    s.parent = parent;
    s.base = base;
    s.owner_start = owner_start;
    s.letrec = letrec;
    return &s;
  }
  // A let/letrec scope of `n` slots inside the current frame.
  const Scope* flat_scope(const Ctx& c, uint32_t n, bool letrec) {
    uint32_t base = c.owner->size;
    c.owner->size += n;
    return new_scope(c.scope, base, false, letrec);
  }

  // ---- functions ------------------------------------------------------------------------------
  void top_level() {
    const Node* root = x_.root_;  // a Letrec: the defines (prelude first), then the program
    owners_.emplace_back();
    Owner* o = &owners_.back();
    o->size = root->frame_size;
    depth_ = max_depth_ = 0;
    Proto& p = c_.protos[0];
    p.entry = here();
    p.node = root;
    p.name = "top level";
    const Scope* s = new_scope(nullptr, 0, true, true);
    Ctx c{s, o, nullptr, true, false};
    tick(root);
    current_ = root;
    letrec_body(root, c, s);
    c_.protos[0].frame_size = o->size;
    c_.protos[0].max_stack = uint32_t(max_depth_);
  }

  void function(const PendingLambda& w) {
    const Node* lam = w.node;
    owners_.emplace_back();
    Owner* o = &owners_.back();
    o->size = lam->frame_size;
    depth_ = max_depth_ = 0;
    c_.protos[w.proto].entry = here();
    const Scope* s = new_scope(w.scope, 0, true, false);
    Ctx c{s, o, nullptr, true, false};
    current_ = lam;
    expr(lam->kids[0], c, false);
    c_.protos[w.proto].frame_size = o->size;
    c_.protos[w.proto].max_stack = uint32_t(max_depth_);
  }

  // ---- expressions ----------------------------------------------------------------------------
  static bool trivial(const Node* n) {
    return n->kind == NodeKind::Const || n->kind == NodeKind::Local || n->kind == NodeKind::Free;
  }
  static Ctx nontail(const Ctx& c) {
    Ctx r = c;
    r.tail = r.loop_tail = false;
    return r;
  }

  // The value is on the stack: return it in tail position. Returns whether control falls through.
  bool finish(const Ctx& c, const Node* n) {
    if (!c.tail) return true;
    emit(OP_RETURN, n);
    stack(-1);
    return false;
  }

  // The `c` operand of a branch: where its value goes when the lanes disagree (or when AND/OR
  // short-circuits). Join points are patched by the caller through `join`.
  uint32_t continuation(const Ctx& c, uint32_t at, std::vector<uint32_t>& join) {
    if (c.tail) return 0;
    if (c.loop_tail) c.loop->exit_patches.push_back(at);
    else join.push_back(at);
    return 0;
  }

  struct Slot {
    uint32_t frames, slot;
    bool checked;
  };
  // The runtime address of a Local node: frames up from the current frame, and the flat slot.
  static Slot resolve(const Node* n, const Ctx& c) {
    const Scope* s = c.scope;
    uint32_t frames = 0;
    for (uint32_t d = n->depth; d; --d) {
      if (s->owner_start) ++frames;
      s = s->parent;
    }
    return {frames, s->base + n->slot, s->letrec};
  }

  void local(const Node* n, const Ctx& c) {
    Slot s = resolve(n, c);
    emit(s.checked ? OP_LOCAL_CHECKED : OP_LOCAL, n, s.frames, s.slot);
    stack(1);
  }

  // Evaluates n for its effect only (a non-final expression of a body).
  void effect(const Node* n, const Ctx& c) {
    if (trivial(n)) {
      // dmci looks a variable up without a step: only reading an unassigned letrec slot can fail
      if (n->kind != NodeKind::Local || !resolve(n, c).checked) return;
      local(n, c);
    } else {
      expr(n, nontail(c), true);
    }
    emit(OP_POP, n);
    stack(-1);
  }

  // Compiles n. `sub`: evaluated as a subexpression (dmci's sub(): constants and variables cost
  // no step there); otherwise it is a continuation of its parent and costs one step.
  // Returns whether control falls through with the value on the stack.
  bool expr(const Node* n, const Ctx& c, bool sub) {
    if (!(sub && trivial(n))) tick(n);
    const Node* parent = current_;
    current_ = n;
    bool falls = node(n, c, parent);
    current_ = parent;
    return falls;
  }

  bool node(const Node* n, const Ctx& c, const Node* parent) {
    switch (n->kind) {
      case NodeKind::Const:
        emit(OP_CONST, n, constant(n->constant));
        stack(1);
        return finish(c, n);
      case NodeKind::Quote:
        emit(OP_QUOTE, n);
        stack(1);
        return finish(c, n);
      case NodeKind::Local:
        local(n, c);
        return finish(c, n);
      case NodeKind::Free:
        emit(OP_FREE, n, n->slot);
        stack(1);
        return finish(c, n);
      case NodeKind::PrimRef:
        emit(OP_CONST, n, constant(Value::prim(n->slot)));
        stack(1);
        return finish(c, n);
      case NodeKind::Lambda: {
        uint32_t id = uint32_t(c_.protos.size());
        c_.protos.emplace_back();
        Proto& p = c_.protos.back();
        p.nparams = n->nparams;
        p.rest = n->rest;
        p.node = n;
        p.name = n->name;
        work_.push_back({n, c.scope, id});
        emit(OP_CLOSURE, n, id);
        stack(1);
        return finish(c, n);
      }
      case NodeKind::If: return if_(n, c);
      case NodeKind::And:
      case NodeKind::Or: return logic(n, c);
      case NodeKind::Begin: {
        size_t k = n->kids.size();
        for (size_t i = 0; i + 1 < k; ++i) effect(n->kids[i], c);
        return expr(n->kids[k - 1], c, false);
      }
      case NodeKind::Let: {
        uint32_t k = n->frame_size;
        for (uint32_t i = 0; i < k; ++i) expr(n->kids[i], nontail(c), true);
        const Scope* s = flat_scope(c, k, false);
        if (k) {
          emit(OP_BIND, n, k, s->base);
          stack(-int32_t(k));
        }
        Ctx inner = c;
        inner.scope = s;
        return expr(n->kids[k], inner, false);
      }
      case NodeKind::Letrec: {
        const Scope* s = flat_scope(c, n->frame_size, true);
        Ctx inner = c;
        inner.scope = s;
        return letrec_body(n, inner, s);
      }
      case NodeKind::Loop: return loop(n, c);
      case NodeKind::Recur: {
        for (const Node* a : n->kids) expr(a, nontail(c), true);
        emit(OP_RECUR, n, c.loop->index);
        stack(-int32_t(n->kids.size()));
        return false;
      }
      case NodeKind::PrimCall: {
        for (const Node* a : n->kids) expr(a, nontail(c), true);
        uint32_t argc = uint32_t(n->kids.size());
        emit(OP_PRIM, n, argc, n->slot);
        stack(1 - int32_t(argc));
        return finish(c, n);
      }
      case NodeKind::Call: {
        for (const Node* a : n->kids) expr(a, nontail(c), true);
        uint32_t argc = uint32_t(n->kids.size() - 1);
        uint32_t at = emit(c.tail ? OP_TAIL_CALL : OP_CALL, n, argc);
        c_.outer[at] = parent;
        stack(-int32_t(argc));
        if (!c.tail) return true;
        stack(-1);
        return false;
      }
    }
    throw Error(ErrorKind::Internal, "bytecode: unknown node kind");
  }

  // A Letrec whose scope `s` is already set up in c: mark, init in order, then the body.
  bool letrec_body(const Node* n, const Ctx& c, const Scope* s) {
    if (n->frame_size) emit(OP_UNASSIGNED, n, n->frame_size, s->base);
    size_t inits = n->slots.size();
    for (size_t i = 0; i < inits; ++i) {
      expr(n->kids[i], nontail(c), true);
      emit(OP_SET, n->kids[i], 0, s->base + n->slots[i]);
      stack(-1);
    }
    return expr(n->kids[inits], c, false);
  }

  bool if_(const Node* n, const Ctx& c) {
    expr(n->kids[0], nontail(c), true);
    std::vector<uint32_t> join;
    uint32_t at = emit(OP_IF, n);
    stack(-1);
    continuation(c, at, join);
    int32_t d0 = depth_;
    std::vector<uint32_t> jumps;
    if (expr(n->kids[1], c, false)) {
      jumps.push_back(emit(OP_JUMP, n));
    }
    depth_ = d0;
    patch_b(at, here());
    bool falls;
    if (n->kids.size() > 2) {
      falls = expr(n->kids[2], c, false);
    } else {
      // no else arm: the unspecified value, without a step (as in dmci)
      emit(OP_CONST, n, constant(Value::unspec()));
      stack(1);
      falls = finish(c, n);
    }
    uint32_t end = here();
    for (uint32_t j : jumps) patch_b(j, end);
    for (uint32_t j : join) patch_c(j, end);
    depth_ = d0 + 1;
    if (!falls && jumps.empty()) depth_ = d0;
    return falls || !jumps.empty();
  }

  bool logic(const Node* n, const Ctx& c) {
    expr(n->kids[0], nontail(c), true);
    std::vector<uint32_t> join;
    uint32_t at = emit(n->kind == NodeKind::And ? OP_AND : OP_OR, n);
    continuation(c, at, join);
    int32_t d0 = depth_;  // the first value is still on the stack
    stack(-1);
    bool falls = expr(n->kids[1], c, false);
    for (uint32_t j : join) patch_c(j, here());
    depth_ = d0;
    return falls || !join.empty();
  }

  bool loop(const Node* n, const Ctx& c) {
    uint32_t k = n->frame_size;
    for (uint32_t i = 0; i < k; ++i) expr(n->kids[i], nontail(c), true);
    uint32_t index = uint32_t(c_.loops.size());
    c_.loops.emplace_back();
    emit(OP_LOOP, n, index);
    stack(-int32_t(k));
    owners_.emplace_back();
    Owner* o = &owners_.back();
    o->size = k;
    loops_.emplace_back();
    LoopCtx* lc = &loops_.back();
    lc->index = index;
    const Scope* s = new_scope(c.scope, 0, true, false);
    Ctx inner{s, o, lc, c.tail, !c.tail};
    c_.loops[index].body = here();
    int32_t d0 = depth_;
    expr(n->kids[k], inner, false);
    LoopInfo& info = c_.loops[index];
    info.nvars = k;
    info.frame_size = o->size;
    info.captures = n->captures;
    if (c.tail) {
      depth_ = d0;
      return false;
    }
    uint32_t exit = emit(OP_LOOP_EXIT, n);
    for (uint32_t j : lc->exit_patches) patch_c(j, exit);
    depth_ = d0 + 1;
    return true;
  }
};

}  // namespace

Chunk compile(const Expanded& x) { return Compiler(x).run(); }

}  // namespace ndvm::bytecode

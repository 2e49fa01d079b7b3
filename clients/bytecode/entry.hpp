// The bytecode client's entry point for the core (see ndvm/_core/client_api.hpp), and the
// non-throwing compile/disassemble wrappers its Cython module calls.
#pragma once
#include "client_api.hpp"
#include "vm.hpp"

namespace ndvm::bytecode {

inline bool entry(void* machine, int dtype, const void* expanded, const void* compiled,
                  const RunRequest* rq, ErrorInfo* err) noexcept {
  const auto& x = *static_cast<const Expanded*>(expanded);
  return guarded(*err, [&] {
    NDVM_ASSERT(compiled != nullptr);
    const auto& c = *static_cast<const Chunk*>(compiled);
    NDVM_ASSERT(c.program == &x);
    if (dtype == int(DType::F64)) run(*static_cast<Machine<double>*>(machine), x, c, *rq);
    else run(*static_cast<Machine<float>*>(machine), x, c, *rq);
  });
}

inline bool compile_guarded(const void* expanded, Chunk* out, ErrorInfo* err) {
  return guarded(*err, [&] { *out = compile(*static_cast<const Expanded*>(expanded)); });
}

}  // namespace ndvm::bytecode

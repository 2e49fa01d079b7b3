// dmci's entry point for the core (see ndvm/_core/client_api.hpp).
#pragma once
#include "client_api.hpp"
#include "eval.hpp"

namespace ndvm::dmci {

inline bool entry(void* machine, int dtype, const void* expanded, const void* /*compiled*/,
                  const RunRequest* rq, ErrorInfo* err) noexcept {
  const auto& x = *static_cast<const Expanded*>(expanded);
  return guarded(*err, [&] {
    if (dtype == int(DType::F64)) run(*static_cast<Machine<double>*>(machine), x, *rq);
    else run(*static_cast<Machine<float>*>(machine), x, *rq);
  });
}

}  // namespace ndvm::dmci

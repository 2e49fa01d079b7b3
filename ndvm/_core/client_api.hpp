// The one function a client exports: run a program (already expanded by the core, and compiled by
// the client if it compiles) on a machine. It never throws; failures come back in ErrorInfo.
// The core's Cython layer calls it through a plain function pointer, so clients are separate
// extension modules that only share the core's headers.
#pragma once
#include "execute.hpp"

namespace ndvm {

enum class DType : int { F64 = 0, F32 = 1 };

using ClientEntry = bool (*)(void* machine, int dtype, const void* expanded, const void* compiled,
                             const RunRequest* rq, ErrorInfo* err);

}  // namespace ndvm

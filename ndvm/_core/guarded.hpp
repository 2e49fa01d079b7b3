// The core's entry points for the Cython layer, as non-throwing wrappers: each returns false and
// fills ErrorInfo on failure. (Not to be confused with Binding, a free name's input: machine.hpp.)
#pragma once
#include "ast.hpp"
#include "client_api.hpp"

namespace ndvm {

// (`text`: `size` characters followed by a NUL, read in place: a Python str's UTF-8)
inline bool expand_guarded(const char* text, size_t size, const std::string& name,
                           std::shared_ptr<const Expanded>* out, ErrorInfo* err) {
  return guarded(*err, [&] { *out = expand_program(std::string_view(text, size), name); });
}

inline bool read_guarded(const std::string& text, const std::string& name,
                         std::shared_ptr<Source>* out, ErrorInfo* err) {
  return guarded(*err, [&] { *out = read_source(text, name); });
}

inline bool call_entry(ClientEntry entry, void* machine, int dtype, const void* expanded,
                       const void* compiled, const RunRequest* rq, ErrorInfo* err) {
  return entry(machine, dtype, expanded, compiled, rq, err);
}

inline bool check_outputs_guarded(const Expanded* x, int64_t max_memory, uint64_t S, uint64_t N,
                                  uint64_t arrays, ErrorInfo* err) {
  return guarded(*err, [&] { check_outputs(*x, max_memory, S, N, arrays); });
}

template <class T>
inline bool reverse_guarded(void* machine, const double* seed, double** jac_out,
                            double** grad_out, size_t nbind, ErrorInfo* err) {
  return guarded(*err, [&] {
    reverse_seeded(*static_cast<Machine<T>*>(machine), seed, jac_out, grad_out, nbind);
  });
}

}  // namespace ndvm

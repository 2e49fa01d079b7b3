// Native stack guard. Every recursive walk in the core and the clients (reader, expander,
// evaluator, structural helpers) checks how much of the calling thread's stack is left and raises
// LimitError before it runs out, so deep nesting never overflows, whatever the thread's stack size.
#pragma once
#include <pthread.h>

#include <algorithm>
#include <string>

#include "error.hpp"

namespace ndvm {

// The lowest address this thread's stack may reach, with a safety margin. Looked up once per
// thread (pthread_getattr_np can be slow for the main thread).
inline char* native_stack_limit() {
  static thread_local char* limit = nullptr;
  if (!limit) {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    char here;
    char* base = static_cast<char*>(addr);
    if (addr && size >= (size_t(64) << 10) && &here > base && &here < base + size) {
      limit = base + std::min<size_t>(size / 4, size_t(512) << 10);
    } else {
      limit = &here - (size_t(256) << 10);  // unknown stack: assume 512 KiB, keep half spare
    }
  }
  return limit;
}

// Whether the calling frame is below `limit` (native_stack_limit(), which a walk may look up once
// and pass down: each lookup is a call through this library's thread-local storage).
inline bool native_stack_exhausted(const char* limit) {
  char here;
  return &here < limit;
}

inline bool native_stack_exhausted() { return native_stack_exhausted(native_stack_limit()); }

// Throws `kind` with `what` when the native stack is nearly exhausted.
inline void check_native_stack(ErrorKind kind, const char* what) {
  if (native_stack_exhausted())
    throw Error(kind, std::string(what) +
                          " nested too deeply for the native stack (run it in a thread with a "
                          "larger stack, or nest less deeply)");
}

}  // namespace ndvm

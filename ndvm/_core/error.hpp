// ndvm::Error — the one exception type the core and the clients throw for bad programs and inputs.
// Every error carries a kind (ReadError, FormError, UnboundError, EvalError, LimitError), a message,
// the source position (file:line:col) of the offending form, its text, and a short Scheme backtrace.
// ErrorInfo is the plain struct the Cython layer reads after a failed call; no exception crosses a
// shared-object boundary.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace ndvm {

enum class ErrorKind : int { None = 0, Read, Form, Unbound, Eval, Limit, Internal };

inline const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Read: return "ReadError";
    case ErrorKind::Form: return "FormError";
    case ErrorKind::Unbound: return "UnboundError";
    case ErrorKind::Eval: return "EvalError";
    case ErrorKind::Limit: return "LimitError";
    case ErrorKind::Internal: return "InternalError";
    default: return "None";
  }
}

struct SrcPos {
  int line = 0;
  int col = 0;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg, SrcPos pos = {}, std::string form = {})
      : std::runtime_error(msg), kind_(kind), pos_(pos), form_(std::move(form)) {}
  ErrorKind kind_;
  SrcPos pos_;
  std::string form_;
  std::string file_;
  std::vector<std::string> backtrace_;
};

// Appends one frame to a short Scheme backtrace: at most 8 entries, repeats folded into one.
// A size in memory as the limit messages write it: bytes below 1 KiB, KiB below 1 MiB, else
// MiB (a limit of a few hundred bytes read "0 MiB").
inline std::string memory_text(double bytes) {
  char out[48];
  if (bytes < 1024.0)
    std::snprintf(out, sizeof out, "%.0f bytes", bytes);
  else if (bytes < 1048576.0)
    std::snprintf(out, sizeof out, "%.0f KiB", bytes / 1024.0);
  else
    std::snprintf(out, sizeof out, "%.0f MiB", bytes / 1048576.0);
  return out;
}

inline void add_backtrace(Error& e, const std::string& frame) {
  auto& bt = e.backtrace_;
  const std::string folded = frame + " (repeated)";
  if (!bt.empty() && (bt.back() == frame || bt.back() == folded)) {
    bt.back() = folded;
    return;
  }
  if (bt.size() < 8) bt.push_back(frame);
}

// What the Python layer reads after a call that failed.
struct ErrorInfo {
  int kind = 0;
  int line = 0;
  int col = 0;
  std::string message;
  std::string form;
  std::string file;
  std::string backtrace;  // newline-separated, innermost call first
};

inline void fill_error(ErrorInfo& info, const Error& e) {
  info.kind = static_cast<int>(e.kind_);
  info.line = e.pos_.line;
  info.col = e.pos_.col;
  info.message = e.what();
  info.form = e.form_;
  info.file = e.file_;
  info.backtrace.clear();
  for (const auto& s : e.backtrace_) {
    if (!info.backtrace.empty()) info.backtrace += "\n";
    info.backtrace += s;
  }
}

// Runs f and turns every C++ exception into an ErrorInfo; returns false on failure.
template <class F>
bool guarded(ErrorInfo& info, F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    fill_error(info, e);
  } catch (const std::bad_alloc&) {
    info.kind = static_cast<int>(ErrorKind::Limit);
    info.message = "out of memory (lower the lane count or the memory limit)";
  } catch (const std::exception& e) {
    info.kind = static_cast<int>(ErrorKind::Internal);
    info.message = std::string("internal error: ") + e.what();
  } catch (...) {
    info.kind = static_cast<int>(ErrorKind::Internal);
    info.message = "internal error: unknown exception";
  }
  return false;
}

#define NDVM_ASSERT(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) throw ::ndvm::Error(::ndvm::ErrorKind::Internal,                           \
                                     std::string("internal invariant failed: ") + #cond); \
  } while (0)

}  // namespace ndvm

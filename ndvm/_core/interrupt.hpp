// A long evaluation interrupted: Ctrl-C (SIGINT) or SIGTERM stops it within 65,536 steps (within
// one step when each step works on many lanes). Python runs its signal handlers only between
// bytecodes, so a native evaluation of a billion steps (a raised max_steps), or of millions of
// steps on large data, would not see one until it ended. Around such an evaluation
// (Machine._call in _core.pyx: above the default step limit, or of at least 65,536 lanes, on the
// main thread) a C handler for both signals sets a flag the machine's step check reads
// (Limits::interrupt), then calls the handler it replaced (Python's, which marks the signal for
// the Python handler that runs once the call returns); the default action of a signal with no
// handler is taken as before, an ignored one stays ignored.
#pragma once
#include <csignal>
#include <cstring>

#include "machine.hpp"

namespace ndvm::interrupt {

inline volatile std::sig_atomic_t flag = 0;
inline struct sigaction previous[2];  // SIGINT's, SIGTERM's

inline void on_signal(int sig, siginfo_t* info, void* context) {
  struct sigaction& was = previous[sig == SIGINT ? 0 : 1];
  if (!(was.sa_flags & SA_SIGINFO) && was.sa_handler == SIG_IGN) return;
  flag = sig;
  if (was.sa_flags & SA_SIGINFO) {
    if (was.sa_sigaction) was.sa_sigaction(sig, info, context);
  } else if (was.sa_handler == SIG_DFL) {
    sigaction(sig, &was, nullptr);  // (the default action, once this handler returns)
    std::raise(sig);
  } else {
    was.sa_handler(sig);
  }
}

// Arm the handler and point ``limits`` at its flag, read every step when ``every_step`` (an
// evaluation of many lanes, whose every step is long), else every 65,536 steps.
inline void arm(Limits& limits, bool every_step) {
  struct sigaction a;
  std::memset(&a, 0, sizeof a);
  a.sa_sigaction = on_signal;
  a.sa_flags = SA_SIGINFO;
  sigemptyset(&a.sa_mask);
  flag = 0;
  sigaction(SIGINT, &a, &previous[0]);
  sigaction(SIGTERM, &a, &previous[1]);
  limits.interrupt = &flag;
  limits.interrupt_mask = every_step ? 0 : 0xFFFF;
}

// Put the replaced handlers back; the signal that arrived meanwhile, or 0.
inline int disarm(Limits& limits) {
  limits.interrupt = nullptr;
  limits.interrupt_mask = 0xFFFF;
  sigaction(SIGINT, &previous[0], nullptr);
  sigaction(SIGTERM, &previous[1], nullptr);
  int got = flag;
  flag = 0;
  return got;
}

}  // namespace ndvm::interrupt

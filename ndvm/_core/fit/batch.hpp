// A chunk of calibrations run back to back in one native call with the GIL released (a chunk of
// ndvm.fit_many; ndvm.fit is a chunk of one). Every fit is independent: its request points at its
// own slice of the caller's result arrays, and a fit that fails keeps its error in its own
// ErrorInfo while the others run on. All fits of a chunk share one machine (one per thread);
// a shared chunk (SharedFits) is run by several threads at once, each on its own machine.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>

#include "fit/after.hpp"
#include "fit/fit.hpp"

namespace ndvm {

inline bool fit_one(FitRequest* rq, void* machine, int dtype, ErrorInfo* err) {
  rq->machine = machine;
  rq->dtype = dtype;
  rq->n_evals = 0;
  if (rq->evaluate_only) {  // (nothing to fit: the evaluation after it alone)
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::fill(rq->losses, rq->losses + rq->S, nan);
    std::fill(rq->history, rq->history + rq->S, nan);  // (its one row)
  } else if (!fit_guarded(rq, err)) {
    return false;
  }
  ErrorInfo after_err;  // (the fit stands; a failed evaluation after it is marked in its output)
  if (rq->after && !guarded(after_err, [&] { evaluate_after(rq); }) && rq->after_out)
    rq->after_out[0] = -1.0;
  return true;
}

inline void fit_batch(FitRequest* rq, size_t n, void* machine, int dtype, ErrorInfo* err,
                      uint8_t* ok) {
  for (size_t i = 0; i < n; ++i) ok[i] = fit_one(&rq[i], machine, dtype, err + i);
}

// The claims on a shared chunk: the next fit nobody has taken, how many are finished, and how
// many threads are inside fit_shared (entered under the GIL while the chunk is open: the owner
// reuses the chunk only once none is, shared_quiet). A thread that waits for the finished count
// (shared_wait) or for the last thread to leave (shared_quiet) blocks on ``changed`` without
// spinning; the threads it waits for notify it only while someone waits (``waiting``), so an
// unwatched fit costs one extra atomic load.
struct SharedFits {
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::atomic<int> active{0};
  // (mutable: a waiter that only reads the counts still registers and blocks)
  mutable std::atomic<int> waiting{0};
  mutable std::mutex lock;
  mutable std::condition_variable changed;
};

inline void shared_reset(SharedFits* s) {
  s->next.store(0);
  s->done.store(0);
}

// After a change of ``done`` or ``active`` (made with seq_cst): wake the waiters. A waiter
// raises ``waiting`` (seq_cst) before it reads the condition under the lock, so either it sees
// the change or this sees it waiting; taking the lock orders the notification after its check.
inline void shared_changed(const SharedFits* s) {
  if (s->waiting.load() == 0) return;
  { std::lock_guard<std::mutex> hold(s->lock); }
  s->changed.notify_all();
}

// Block (without spinning) until ``ready()`` holds; it is re-read after each notification.
template <class Ready>
inline void shared_block(const SharedFits* s, Ready ready) {
  if (ready()) return;
  s->waiting.fetch_add(1);
  {
    std::unique_lock<std::mutex> hold(s->lock);
    s->changed.wait(hold, ready);
  }
  s->waiting.fetch_sub(1);
}

// A sign another thread sets to stop a thread's fit_shared before its next claim (its running
// fit ends first): the thread lent to a batch until then is called back without taking the GIL
// between fits to look.
struct StopSign {
  std::atomic<int> set{0};
};
inline void stop_set(StopSign* s) { s->set.store(1); }
inline bool stop_is_set(const StopSign* s) { return s->set.load() != 0; }

// Run fits of the chunk on this thread's machine, one claim at a time, until none is left,
// ``limit`` are run or ``stop`` (when given) is set: any number of threads may run it at once
// (the GIL released), each returning once every fit is claimed; a fit claimed by another thread
// may still be running (shared_wait waits for it). Returns how many fits this call ran.
inline size_t fit_shared(FitRequest* rq, size_t n, SharedFits* s, void* machine, int dtype,
                         ErrorInfo* err, uint8_t* ok, size_t limit,
                         const StopSign* stop = nullptr) {
  size_t ran = 0;
  while (ran < limit && !(stop && stop->set.load())) {
    size_t i = s->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) break;
    ok[i] = fit_one(&rq[i], machine, dtype, err + i);
    s->done.fetch_add(1);  // (seq_cst: publishes fit i's outputs; see shared_changed)
    shared_changed(s);
    ++ran;
  }
  return ran;
}

// Until every fit of the chunk is finished (at most the last claimed fits of other threads).
inline void shared_wait(const SharedFits* s, size_t n) {
  shared_block(s, [s, n] { return s->done.load() >= n; });
}

// Whether every fit of the chunk is finished (without waiting).
inline bool shared_finished(const SharedFits* s, size_t n) { return s->done.load() >= n; }

// No more claims: every fit not yet claimed never runs; waits for the claimed ones to finish.
inline void shared_cancel(SharedFits* s, size_t n) {
  size_t claimed = s->next.exchange(n);
  shared_wait(s, claimed < n ? claimed : n);
}

inline void shared_enter(SharedFits* s) { s->active.fetch_add(1); }
inline void shared_leave(SharedFits* s) {
  s->active.fetch_sub(1);
  shared_changed(s);
}

// Whether no thread is inside fit_shared (without waiting).
inline bool shared_is_quiet(const SharedFits* s) { return s->active.load() == 0; }

// Until no thread is inside fit_shared (those still there have nothing left to claim).
inline void shared_quiet(const SharedFits* s) {
  shared_block(s, [s] { return s->active.load() == 0; });
}

}  // namespace ndvm

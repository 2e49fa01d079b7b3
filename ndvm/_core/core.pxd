# Declarations of the C++ core for Cython (no code). Clients cimport what they need from here.
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "error.hpp" namespace "ndvm":
    cdef struct SrcPos:
        int line
        int col

    cdef cppclass ErrorInfo:
        int kind
        int line
        int col
        string message
        string form
        string file
        string backtrace


cdef extern from "ast.hpp" namespace "ndvm":
    cdef cppclass FreeName:
        string name
        SrcPos pos

    cdef cppclass Source:
        string name_

    cdef cppclass Expanded:
        vector[FreeName] free_
        bool bounded_

    SrcPos result_pos(const Expanded& x)

    const char* prelude_text()


cdef extern from "machine.hpp" namespace "ndvm":
    cdef enum class BindKind(int):
        Param
        Data
        Const

    cdef struct Binding:
        BindKind kind
        const double* values
        int64_t rows
        int64_t cols

    cdef cppclass Limits:
        int64_t max_steps
        int64_t max_depth
        int64_t max_memory


cdef extern from "interrupt.hpp":
    void interrupt_arm "ndvm::interrupt::arm"(Limits&, bool) nogil
    int interrupt_disarm "ndvm::interrupt::disarm"(Limits&) nogil


cdef extern from "machine.hpp" namespace "ndvm":
    cdef cppclass Machine[T]:
        Machine()
        Limits limits_
        bool compat_ref_
        size_t bytes_in_use()


cdef extern from "execute.hpp" namespace "ndvm":
    bool outputs_fit(int64_t max_memory, uint64_t S, uint64_t N, uint64_t arrays) nogil
    cdef cppclass RunRequest:
        const Binding* bindings
        size_t nbind
        uint32_t S
        uint32_t N
        bool grad
        double* value_out
        const double* seed
        const double* target
        double* loss_out
        double** jac_out
        double** grad_out


cdef extern from "client_api.hpp" namespace "ndvm":
    ctypedef bool (*ClientEntry)(void* machine, int dtype, const void* expanded,
                                 const void* compiled, const RunRequest* rq,
                                 ErrorInfo* err) noexcept nogil


cdef extern from "prims.hpp" namespace "ndvm":
    cdef struct PrimInfo:
        const char* name
        int min_args
        int max_args
        const char* family
    const int P_COUNT
    const PrimInfo& prim_info(int id)


cdef extern from "reader.hpp" namespace "ndvm":
    cdef enum class DatumKind(unsigned char):
        Num
        Bool
        Sym
        List

    cdef cppclass Datum:
        DatumKind kind
        bool is_int
        bool dotted
        int sym
        double num
        int first
        int count
        SrcPos pos

    cdef cppclass SourceData "ndvm::Source":
        string name_
        vector[Datum] data_
        vector[int] kids_
        vector[int] top_
        vector[string] symbols_


cdef extern from "guarded.hpp" namespace "ndvm":
    bool expand_guarded(const char* text, size_t size, const string& name,
                        shared_ptr[const Expanded]* out, ErrorInfo* err) nogil
    bool read_guarded(const string& text, const string& name,
                      shared_ptr[SourceData]* out, ErrorInfo* err) nogil
    bool call_entry(ClientEntry entry, void* machine, int dtype, const void* expanded,
                    const void* compiled, const RunRequest* rq, ErrorInfo* err) nogil
    bool check_outputs_guarded(const Expanded* x, int64_t max_memory, uint64_t S, uint64_t N,
                               uint64_t arrays, ErrorInfo* err)
    bool reverse_guarded[T](void* machine, const double* seed, double** jac_out,
                            double** grad_out, size_t nbind, ErrorInfo* err) nogil


cdef extern from "fit/fit.hpp" namespace "ndvm":
    cdef enum class Optimizer(int):
        Adam
        LBFGS
        LM

    cdef enum class Scaling(int):
        Jac
        Unscaled
        Both

    cdef cppclass FitRequest:
        ClientEntry entry
        void* machine
        int dtype
        const void* expanded
        const void* compiled
        vector[Binding] bindings
        vector[int] param_binding
        uint32_t S
        uint32_t N
        const double* target
        Optimizer optimizer
        int budget
        double lr
        double beta1
        double beta2
        double eps
        double tol
        double ftol
        double gtol
        int loss
        const unsigned char* positive
        Scaling scaling
        bool uncertainty
        const double* lower
        const double* upper
        double* params
        double* losses
        double* history
        unsigned char* converged
        signed char* status
        double* cov
        double* stderr_
        unsigned char* flags
        int64_t n_evals
        const AfterFit* after
        double* after_out
        bool evaluate_only

    cdef struct AfterSegment:
        uint32_t start
        uint32_t stop
        const double* ref
        double center

    cdef cppclass AfterFit:
        vector[Binding] bindings
        uint32_t M
        vector[AfterSegment] segments

    const size_t kAfterStats

    bool fit_guarded(FitRequest* rq, ErrorInfo* err) nogil


cdef extern from "fit/outputs.hpp" namespace "ndvm":
    cdef struct FitSlot:
        int64_t init
        int64_t params
        int64_t losses
        int64_t history
        int64_t cov
        int64_t stderr_
        int64_t status
        int64_t converged
        int64_t flags
        int64_t P
        int64_t S
        int64_t history_rows
        int64_t uncertainty
        int64_t n_evals
        int64_t after
        int64_t after_size

    const size_t kFitSlotFields

    cdef cppclass FitLayout:
        vector[FitSlot] slots
        size_t n64
        size_t n8
        void clear()
        size_t add(const FitRequest& rq, const double* x0)
        void point(FitRequest* rq, double* f64, unsigned char* u8)
        void collect(const FitRequest* rq)

    int64_t best_start(const FitSlot& sl, const double* f64)


cdef extern from "fit/batch.hpp" namespace "ndvm":
    void fit_batch(FitRequest* rq, size_t n, void* machine, int dtype, ErrorInfo* err,
                   unsigned char* ok) nogil
    cppclass SharedFits:
        pass
    void shared_reset(SharedFits* s) nogil
    cppclass StopSign:
        pass
    void stop_set(StopSign* s) nogil
    bint stop_is_set(const StopSign* s) nogil
    size_t fit_shared(FitRequest* rq, size_t n, SharedFits* s, void* machine, int dtype,
                      ErrorInfo* err, unsigned char* ok, size_t limit, const StopSign* stop) nogil
    void shared_wait(const SharedFits* s, size_t n) nogil
    bint shared_finished(const SharedFits* s, size_t n) nogil
    void shared_cancel(SharedFits* s, size_t n) nogil
    void shared_enter(SharedFits* s) nogil
    void shared_leave(SharedFits* s) nogil
    void shared_quiet(const SharedFits* s) nogil
    bint shared_is_quiet(const SharedFits* s) nogil

; An unbound name is reported before anything runs.
; expect error: UnboundError line 4
(define (f x) (* x 2))
(f undefined-thing)

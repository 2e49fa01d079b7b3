; Wrong number of arguments to a closure.
; expect error: EvalError line 4
(define (f a b) (+ a b))
(f 1)

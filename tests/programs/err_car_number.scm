; car of a number.
; expect error: EvalError line 3
(define (first x) (car x))
(+ 1 (first 1.0))

; Closures capture their environment.
; expect: 15
(define (adder k) (lambda (x) (+ x k)))
(define add5 (adder 5))
(add5 10)

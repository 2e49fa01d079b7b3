; Tail-recursive factorial with an accumulator.
; expect: 3628800
(define (fact n acc)
  (if (= n 0) acc (fact (- n 1) (* acc n))))
(fact 10 1)

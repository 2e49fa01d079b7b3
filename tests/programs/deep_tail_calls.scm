; Mutual tail recursion, 100000 deep.
; expect: 1
(define (ev? n) (if (= n 0) 1 (od? (- n 1))))
(define (od? n) (if (= n 0) 0 (ev? (- n 1))))
(ev? 100000)

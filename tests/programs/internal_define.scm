; Internal defines in a body.
; data: x=3
; expect: 18
(define (f y)
  (define z (* y 2))
  (define (g w) (+ w z))
  (g (* y y)))
(+ (f x) (- x 3) (* 0 x) (- 6 x) 0)

; cond with else, case with lists of datums.
; expect: 321
(define (classify x)
  (cond ((< x 0) 'negative)
        ((= x 0) 'zero)
        (else 'positive)))
(define (score s)
  (case s ((negative) 1) ((zero) 20) ((positive big) 300) (else 0)))
(+ (score (classify -2)) (score (classify 0)) (score (classify 5)))

; A rest argument collects the extra arguments.
; expect: 10
(define (sum-all . xs) (fold-left + 0 xs))
(sum-all 1 2 3 4)

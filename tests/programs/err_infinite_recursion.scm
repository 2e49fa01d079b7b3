; Non-tail infinite recursion hits the depth limit, not the native stack.
; expect error: LimitError line 3
(define (f n) (+ 1 (f n)))
(f 1)

; A long loop runs in constant native stack.
; expect: 500000500000
(loop ((i 1) (s 0)) (if (> i 1000000) s (recur (+ i 1) (+ s i))))

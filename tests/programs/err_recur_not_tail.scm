; recur must be in tail position.
; expect error: FormError line 3
(loop ((i 0)) (+ 1 (recur (+ i 1))))

; An infinite loop hits the step limit.
; expect error: LimitError line 3
(loop ((i 0)) (recur (+ i 1)))

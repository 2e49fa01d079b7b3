; Shape mismatch.
; expect error: EvalError line 3
(dot (vec 1 2) (vec 1 2 3))

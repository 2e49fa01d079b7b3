; An index out of range.
; expect error: EvalError line 3
(ref (vec 1 2) 2)

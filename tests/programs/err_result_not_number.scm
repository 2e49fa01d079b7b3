; The program's result must be a number.
; expect error: EvalError line 3
(list 1 2)

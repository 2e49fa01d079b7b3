; Wrong number of arguments to a primitive is caught when the program is read.
; expect error: EvalError line 3
(cons 1)

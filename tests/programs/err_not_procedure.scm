; Calling a number.
; expect error: EvalError line 3
(let ((f 3)) (f 1))

; Unbalanced parentheses.
; expect error: ReadError line 3
(+ 1
   (* 2 3)

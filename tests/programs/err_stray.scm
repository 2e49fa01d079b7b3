; A stray closing parenthesis.
; expect error: ReadError line 3
(+ 1 2))

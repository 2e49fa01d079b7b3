; Bad # syntax.
; expect error: ReadError line 3
(if #x 1 2)

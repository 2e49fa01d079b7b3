; set! is not part of the language.
; expect error: FormError line 3
(let ((x 1)) (set! x 2) x)

; A malformed let binding.
; expect error: FormError line 3
(let ((x)) x)

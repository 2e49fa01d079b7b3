; A malformed special form.
; expect error: FormError line 4
(define y 2)
(if)

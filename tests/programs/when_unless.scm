; when and unless.
; expect: 3
(+ (if (when (> 2 1) #t) 1 0) (if (unless (< 2 1) #f) 0 2))

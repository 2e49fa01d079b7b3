; and/or return the deciding value.
; expect: 7
(+ (or #f 3) (and 1 2 4) (if (and) 0 100) (if (or) 100 0))

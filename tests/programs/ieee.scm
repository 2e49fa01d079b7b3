; IEEE semantics by default: (/ 1 0) is inf, (sqrt -1) is nan.
; expect: inf
(+ (/ 1.0 0.0) (if (= (sqrt -1) (sqrt -1)) 0 1))

; modulo is floored, remainder truncated (R7RS).
; expect: 5
(+ (modulo -7 3) (remainder -7 3) (modulo 7 -3) (remainder 7 3) (round 2.5) (round 3.5) (truncate -1.5) (floor -1.5) (ceiling 1.2))

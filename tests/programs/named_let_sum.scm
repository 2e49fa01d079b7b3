; Named let.
; expect: 5050
(let loop ((i 1) (s 0))
  (if (> i 100) s (loop (+ i 1) (+ s i))))

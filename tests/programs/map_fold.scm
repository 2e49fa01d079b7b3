; The prelude: map, filter, fold-left, fold-right, reduce, iota.
; expect: 116
(+ (fold-left + 0 (map (lambda (x) (* x x)) (iota 5)))
   (fold-right (lambda (x acc) (+ x acc)) 0 (filter (lambda (x) (> x 2)) (list 1 2 3 4 5)))
   (reduce * 1 (list 1 2 3 4))
   (length (list-tail (iota 10) 4))
   (if (any zero? (list 1 0)) 1 0)
   (if (every positive? (list 1 2)) 1 0)
   (car (map + (list 1 2) (list 10 20))) 31)

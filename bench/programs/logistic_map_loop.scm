; 16 steps of the logistic map (loop/recur; the counter stays uniform)
(loop ((x x0) (k 0)) (if (= k 16) x (recur (* r (* x (- 1.0 x))) (+ k 1))))

; non-tail recursion, depth 10
(letrec ((f (lambda (n) (if (= n 0) 0.0 (+ (* a (sin (* b n))) (f (- n 1))))))) (f 10))

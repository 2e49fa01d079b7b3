; let binds in parallel, let* in sequence, letrec recursively.
; params: a=2
; expect: 17
(let ((a 10) (b a))
  (let* ((c (+ a b)) (d (* c 2)))
    (letrec ((f (lambda (n) (if (= n 0) 0 (+ 1 (f (- n 1)))))))
      (+ (- d c) (f 3) (- b a) a))))

; Quote, lists and equality.
; expect: 1
(if (and (equal? '(1 (2 3) x) (list 1 (list 2 3) 'x)) (eq? 'a 'a) (not (eq? 'a 'b)) (null? '()) (pair? '(1)) (symbol? 'q))
    1 0)

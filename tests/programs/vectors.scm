; Vectors and matrices.
; expect: 38
(let* ((v [1 2 3])
       (M (mat [1 2] [3 4]))
       (I (eye 2)))
  (+ (dot v v) (vsum (cross v [0 0 1])) (trace (matmul M I)) (det M) (ref M 1 0) (vlen v)
     (vsum (matvec M [1 1])) (trace (inv (mat [2 0] [0 4]))) (vsum (solve M [5 11])) 0.25))

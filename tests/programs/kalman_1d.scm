; A 1-D Kalman filter negative log likelihood over a constant vector.
; params: q=0.1 r=0.5
; consts: obs=0.5,0.1,-0.2,0.4
; expect: 0.5962816296035441
(loop ((k 0) (m 0.0) (P 1.0) (L 0.0))
  (if (= k (vlen obs))
      L
      (let* ((Pp (+ P q)) (S (+ Pp r)) (e (- (ref obs k) m)) (K (/ Pp S)))
        (recur (+ k 1) (+ m (* K e)) (* (- 1 K) Pp) (+ L (log S) (/ (* e e) S))))))

; damped oscillator
(* A (* (exp (- 0 (* b t))) (cos (* omega t))))

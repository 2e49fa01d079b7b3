; A damped oscillator: amplitude A, damping b, angular frequency omega, time t (data).
;   ndvm run damped_oscillator.scm --param A=1 --param b=0.3 --param omega=2 --data t=0,0.5,1,1.5 --grad
(* A (* (exp (- 0 (* b t))) (cos (* omega t))))

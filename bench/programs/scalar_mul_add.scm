; y = alpha x + beta
(+ (* alpha x) beta)

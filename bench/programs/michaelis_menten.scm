; Michaelis-Menten rate
(/ (* Vmax S) (+ Km S))

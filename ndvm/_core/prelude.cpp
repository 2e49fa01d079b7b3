// The prelude: Scheme definitions every client loads (map, filter, fold-left, ...), written in
// Scheme. The expander (expand.cpp) reads it once and pulls in only the definitions a program uses.
#include "ast.hpp"

namespace ndvm {

const char* prelude_text() {
  return R"SCM(
;; (up to four lists: without apply a call of f cannot take a list's length in arguments; a
;; fifth list is an error naming the rule, never a map of the first lists alone)
(define (map f xs . more)
  (cond ((null? more)
         (let map1 ((xs xs))
           (if (null? xs) '() (cons (f (car xs)) (map1 (cdr xs))))))
        ((null? (cdr more))
         (let map2 ((xs xs) (ys (car more)))
           (if (or (null? xs) (null? ys))
               '()
               (cons (f (car xs) (car ys)) (map2 (cdr xs) (cdr ys))))))
        ((null? (cddr more))
         (let map3 ((xs xs) (ys (car more)) (zs (cadr more)))
           (if (or (null? xs) (null? ys) (null? zs))
               '()
               (cons (f (car xs) (car ys) (car zs)) (map3 (cdr xs) (cdr ys) (cdr zs))))))
        ((null? (cdr (cddr more)))
         (let map4 ((xs xs) (ys (car more)) (zs (cadr more)) (ws (car (cddr more))))
           (if (or (null? xs) (null? ys) (null? zs) (null? ws))
               '()
               (cons (f (car xs) (car ys) (car zs) (car ws))
                     (map4 (cdr xs) (cdr ys) (cdr zs) (cdr ws))))))
        (else (+ 'map-takes-at-most-four-lists))))
(define (filter keep? xs)
  (cond ((null? xs) '())
        ((keep? (car xs)) (cons (car xs) (filter keep? (cdr xs))))
        (else (filter keep? (cdr xs)))))
(define (fold-left f acc xs)
  (if (null? xs) acc (fold-left f (f acc (car xs)) (cdr xs))))
(define (fold-right f acc xs)
  (if (null? xs) acc (f (car xs) (fold-right f acc (cdr xs)))))
(define (reduce f init xs)
  (if (null? xs) init (fold-left f (car xs) (cdr xs))))
(define (iota n)
  (let build ((k (- n 1)) (acc '()))
    (if (< k 0) acc (build (- k 1) (cons k acc)))))
(define (list-tail xs k)
  (if (= k 0) xs (list-tail (cdr xs) (- k 1))))
(define (any pred xs)
  (if (null? xs) #f (or (pred (car xs)) (any pred (cdr xs)))))
(define (every pred xs)
  (if (null? xs) #t (and (pred (car xs)) (every pred (cdr xs)))))
)SCM";
}

}  // namespace ndvm

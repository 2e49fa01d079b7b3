// The prelude: Scheme definitions every client loads (map, filter, fold-left, ...), written in
// Scheme. The expander (expand.cpp) reads it once and pulls in only the definitions a program uses.
#include "ast.hpp"

namespace ndvm {

const char* prelude_text() {
  return R"SCM(
(define (map f xs . more)
  (if (null? more)
      (let map1 ((xs xs))
        (if (null? xs) '() (cons (f (car xs)) (map1 (cdr xs)))))
      (let map2 ((xs xs) (ys (car more)))
        (if (or (null? xs) (null? ys))
            '()
            (cons (f (car xs) (car ys)) (map2 (cdr xs) (cdr ys)))))))
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

// The vector and matrix primitives (Prims members, declared in prims.hpp): construction, indexing,
// products, and the linear algebra that Machine::linalg differentiates (linalg.hpp). Vectors and
// matrices are runs of elements on the machine's element heap, row-major; every element is a
// number Value, so a product is a dot of payloads and its gradient comes from the tape.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "prims.hpp"

namespace ndvm {

template <class T>
Value Prims<T>::call_vector(int id, const Value* a, int n) {
  switch (id) {
    case P_VEC: return make_vec(a, n);
    case P_MAT: return make_mat(a, n, "mat");
    case P_REF: return ref(a, n);
    case P_DOT: {
      Value u = vec(a[0], "dot"), v = vec(a[1], "dot", 1);
      if (u.cols != v.cols) shape_error("dot", a[0], a[1]);
      return m.dot(elem(u.id), elem(v.id), u.cols);
    }
    case P_CROSS: return cross(a);
    case P_NORM: return m.unary(Op::Sqrt, self_dot(array(a[0], "norm")));
    case P_NORMALIZE: {
      Value v = vec(a[0], "normalize");
      Value nr = m.unary(Op::Sqrt, self_dot(v));
      return arith(Op::Div, v, nr, "normalize");
    }
    case P_VSUM: {
      Value v = array(a[0], "vsum");
      std::vector<Value> ones(v.size(), Value::number(1.0));
      return m.dot(elem(v.id), ones.data(), v.size());
    }
    case P_VLEN: {
      if (a[0].tag == Tag::Vec) return Value::number(a[0].cols);
      if (a[0].tag == Tag::Mat) return Value::number(a[0].rows);
      throw type_error("vlen", "a vector or a matrix", a[0]);
    }
    case P_SCALE: return arith(Op::Mul, num(a[0], id), array(a[1], "scale", 1), "scale");
    case P_MATVEC: {
      Value M = matrix(a[0], "matvec"), v = vec(a[1], "matvec", 1);
      if (M.cols != v.cols) shape_error("matvec", a[0], a[1]);
      return matvec(M, v);
    }
    case P_MATMUL: {
      Value A = matrix(a[0], "matmul");
      if (a[1].tag == Tag::Vec) {
        if (A.cols != a[1].cols) shape_error("matmul", a[0], a[1]);
        return matvec(A, a[1]);
      }
      Value B = matrix(a[1], "matmul", 1);
      if (A.cols != B.rows) shape_error("matmul", a[0], a[1]);
      return matmul(A, B);
    }
  }
  throw Error(ErrorKind::Internal, "not a vector primitive: id " + std::to_string(id));
}

template <class T>
Value Prims<T>::call_matrix(int id, const Value* a, int n) {
  switch (id) {
    case P_TRANSPOSE: return transpose(a[0]);
    case P_TRACE: {
      Value A = square(a[0], "trace");
      std::vector<Value> d(A.rows), ones(A.rows, Value::number(1.0));
      for (uint32_t i = 0; i < A.rows; ++i) d[i] = m.elems_[A.id + i * A.cols + i];
      return m.dot(d.data(), ones.data(), A.rows);
    }
    case P_OUTER: return outer(a);
    case P_DET:
    case P_LOGDET: {
      Value A = square(a[0], prim_info(id).name);
      std::vector<Value> e(m.elems_.begin() + A.id, m.elems_.begin() + A.id + A.size());
      Value r;
      m.linalg(id == P_DET ? Op::Det : Op::LogDet, e.data(), A.rows, nullptr, 0, &r);
      return r;
    }
    case P_INV: {
      Value A = square(a[0], "inv");
      std::vector<Value> e(m.elems_.begin() + A.id, m.elems_.begin() + A.id + A.size()), r(A.size());
      m.linalg(Op::Inv, e.data(), A.rows, nullptr, 0, r.data());
      uint64_t s = m.alloc_elems(A.size());
      std::copy(r.begin(), r.end(), m.elems_.begin() + s);
      return Value::mat(s, A.rows, A.cols);
    }
    case P_SOLVE: return solve(a);
    case P_EYE:
    case P_ZEROS:
    case P_ONES: return filled(id, a, n);
  }
  throw Error(ErrorKind::Internal, "not a matrix primitive: id " + std::to_string(id));
}

template <class T>
Value Prims<T>::cross(const Value* a) {
  Value u = vec(a[0], "cross"), v = vec(a[1], "cross", 1);
  if (u.cols != 3 || v.cols != 3)
    throw Error(ErrorKind::Eval, "cross: expects two vectors of length 3, got lengths " +
                                     std::to_string(u.cols) + " and " + std::to_string(v.cols));
  Value x[3], y[3];
  for (int i = 0; i < 3; ++i) x[i] = m.elems_[u.id + i], y[i] = m.elems_[v.id + i];
  Value r[3];
  for (int i = 0; i < 3; ++i) {
    int j = (i + 1) % 3, k = (i + 2) % 3;
    r[i] = m.binary(Op::Sub, m.binary(Op::Mul, x[j], y[k]), m.binary(Op::Mul, x[k], y[j]));
  }
  return pack_vec(r, 3);
}

template <class T>
Value Prims<T>::transpose(const Value& a) {
  if (a.tag == Tag::Vec) return a;
  Value A = matrix(a, "transpose");
  if (A.cols > 65535)  // a matrix has at most 65535 rows
    throw Error(ErrorKind::Eval, "transpose: a matrix with " + std::to_string(A.cols) +
                                     " columns is too wide to transpose (at most 65535)");
  uint64_t s = m.alloc_elems(A.size());
  for (uint32_t r = 0; r < A.rows; ++r)
    for (uint32_t c = 0; c < A.cols; ++c) m.elems_[s + c * A.rows + r] = m.elems_[A.id + r * A.cols + c];
  return Value::mat(s, uint16_t(A.cols), A.rows);
}

template <class T>
Value Prims<T>::outer(const Value* a) {
  Value u = vec(a[0], "outer"), v = vec(a[1], "outer", 1);
  if (u.cols > 65535) throw Error(ErrorKind::Eval, "outer: vector too long for a matrix");
  uint64_t s = m.alloc_elems(size_t(u.cols) * v.cols);
  for (uint32_t r = 0; r < u.cols; ++r)
    for (uint32_t c = 0; c < v.cols; ++c) {
      Value x = m.elems_[u.id + r], y = m.elems_[v.id + c];
      Value p = m.binary(Op::Mul, x, y);
      m.elems_[s + r * v.cols + c] = p;
    }
  return Value::mat(s, uint16_t(u.cols), v.cols);
}

template <class T>
Value Prims<T>::solve(const Value* a) {
  Value A = square(a[0], "solve");
  Value B = a[1];
  uint32_t k;
  if (B.tag == Tag::Vec) k = 1;
  else if (B.tag == Tag::Mat) k = B.cols;
  else throw type_error("solve", "a vector or a matrix", B, 1);
  uint32_t brows = B.tag == Tag::Vec ? B.cols : B.rows;
  if (brows != A.rows) shape_error("solve", a[0], a[1]);
  std::vector<Value> e(m.elems_.begin() + A.id, m.elems_.begin() + A.id + A.size());
  std::vector<Value> b(m.elems_.begin() + B.id, m.elems_.begin() + B.id + B.size());
  std::vector<Value> r(size_t(A.rows) * k);
  m.linalg(Op::Solve, e.data(), A.rows, b.data(), k, r.data());
  uint64_t s = m.alloc_elems(r.size());
  std::copy(r.begin(), r.end(), m.elems_.begin() + s);
  if (B.tag == Tag::Vec) return Value::vec(s, A.rows);
  return Value::mat(s, A.rows, k);
}

// eye, zeros, ones
template <class T>
Value Prims<T>::filled(int id, const Value* a, int n) {
  const char* who = prim_info(id).name;
  int64_t r = index(a[0], who, 65536, true);
  int64_t c = id == P_EYE ? r : (n == 2 ? index(a[1], who, 1 << 24, true) : -1);
  size_t cnt = size_t(r) * size_t(c < 0 ? 1 : c);
  uint64_t s = m.alloc_elems(cnt);
  for (size_t i = 0; i < cnt; ++i) {
    double v = id == P_ONES ? 1.0 : 0.0;
    if (id == P_EYE && i / size_t(c) == i % size_t(c)) v = 1.0;
    m.elems_[s + i] = Value::number(v);
  }
  if (c < 0) return Value::vec(s, uint32_t(r));
  return Value::mat(s, uint16_t(r), uint32_t(c));
}

template <class T>
Value Prims<T>::pack_vec(const Value* xs, uint32_t n) {
  uint64_t s = m.alloc_elems(n);
  std::copy(xs, xs + n, m.elems_.begin() + s);
  return Value::vec(s, n);
}

template <class T>
Value Prims<T>::make_vec(const Value* a, int n) {
  if (n > 0 && a[0].tag == Tag::Vec) return make_mat(a, n, "vec");
  for (int i = 0; i < n; ++i)
    if (a[i].tag != Tag::Num) throw type_error("vec", "numbers (or vectors, for the rows of a matrix)", a[i], i);
  return pack_vec(a, uint32_t(n));
}

template <class T>
Value Prims<T>::make_mat(const Value* a, int n, const char* who) {
  if (n > 65535) throw Error(ErrorKind::Eval, std::string(who) + ": too many rows");
  uint32_t c = 0;
  for (int i = 0; i < n; ++i) {
    if (a[i].tag != Tag::Vec) throw type_error(who, "vectors as rows", a[i], i);
    if (i == 0) c = a[i].cols;
    else if (a[i].cols != c)
      throw Error(ErrorKind::Eval, std::string(who) + ": rows of different lengths (" +
                                       std::to_string(c) + " and " + std::to_string(a[i].cols) + ")");
  }
  uint64_t s = m.alloc_elems(size_t(n) * c);
  for (int i = 0; i < n; ++i)
    for (uint32_t j = 0; j < c; ++j) m.elems_[s + size_t(i) * c + j] = m.elems_[a[i].id + j];
  return Value::mat(s, uint16_t(n), c);
}

template <class T>
Value Prims<T>::ref(const Value* a, int n) {
  const Value& x = a[0];
  if (x.tag == Tag::Vec) {
    if (n != 2) throw Error(ErrorKind::Eval, "ref: a vector takes one index, got " + std::to_string(n - 1));
    return m.elems_[x.id + index(a[1], "ref", x.cols)];
  }
  if (x.tag == Tag::Mat) {
    int64_t r = index(a[1], "ref", x.rows);
    if (n == 2) return Value::vec(x.id + uint64_t(r) * x.cols, x.cols);
    int64_t c = index(a[2], "ref", x.cols);
    return m.elems_[x.id + uint64_t(r) * x.cols + c];
  }
  throw type_error("ref", "a vector or a matrix", x);
}

template <class T>
Value Prims<T>::self_dot(const Value& v) {
  std::vector<Value> e(m.elems_.begin() + v.id, m.elems_.begin() + v.id + v.size());
  return m.dot(e.data(), e.data(), v.size());
}

template <class T>
Value Prims<T>::matvec(const Value& M, const Value& v) {
  std::vector<Value> r(M.rows);
  for (uint32_t i = 0; i < M.rows; ++i) r[i] = m.dot(elem(M.id + size_t(i) * M.cols), elem(v.id), M.cols);
  return pack_vec(r.data(), M.rows);
}

template <class T>
Value Prims<T>::matmul(const Value& A, const Value& B) {
  std::vector<Value> col(B.rows), out(size_t(A.rows) * B.cols);
  for (uint32_t c = 0; c < B.cols; ++c) {
    for (uint32_t j = 0; j < B.rows; ++j) col[j] = m.elems_[B.id + size_t(j) * B.cols + c];
    for (uint32_t r = 0; r < A.rows; ++r)
      out[size_t(r) * B.cols + c] = m.dot(elem(A.id + size_t(r) * A.cols), col.data(), A.cols);
  }
  uint64_t s = m.alloc_elems(out.size());
  std::copy(out.begin(), out.end(), m.elems_.begin() + s);
  return Value::mat(s, A.rows, B.cols);
}

}  // namespace ndvm

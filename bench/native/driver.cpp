// A native benchmark driver over the core's C++ API, measured the way the reference runtime's
// figures were: warm forward+gradient per call on L lanes (one parameter vector per lane), no
// Python. Usage: driver PROGRAM_FILE LANES CLIENT(dmci|bytecode) DTYPE(f64|f32) [consts.txt]
//   consts.txt: "name rows cols v1 v2 ..." (a matrix constant, e.g. Kalman's obs)
// Prints: microseconds per call (median of batches). With NDVM_BENCH_ITERS=n it runs exactly n
// warm calls instead (for instruction counts under valgrind --tool=callgrind).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ast.hpp"
#include "chunk.hpp"
#include "eval.hpp"
#include "vm.hpp"

using namespace ndvm;

template <class T>
double bench(const Expanded& x, const bytecode::Chunk* chunk, uint32_t L,
             const std::vector<std::pair<std::string, std::vector<double>>>& consts) {
  Machine<T> m;
  std::mt19937_64 rng(0);
  std::normal_distribution<double> nd(0.0, 0.01);
  std::vector<std::vector<double>> storage;
  std::vector<Binding> binds;
  std::vector<double*> jac_ptrs;
  std::vector<std::vector<double>> jac;
  for (auto& f : x.free_) {
    Binding b{};
    auto it = std::find_if(consts.begin(), consts.end(), [&](auto& c) { return c.first == f.name; });
    if (it != consts.end()) {
      storage.push_back(std::vector<double>(it->second.begin() + 2, it->second.end()));
      b.kind = BindKind::Const;
      b.rows = int64_t(it->second[0]);
      b.cols = int64_t(it->second[1]);
    } else {
      // a parameter, one value per lane, near the oracle's defaults
      double base = f.name == "r" ? (x.free_.size() == 2 && consts.empty() ? 3.2 : 0.1)
                    : f.name == "x0" ? 0.4 : f.name == "q" ? 0.05 : f.name == "b" ? 0.3
                    : f.name == "omega" ? 2.0 : f.name == "t" ? 1.5 : 1.0;
      std::vector<double> v(L);
      for (auto& e : v) e = base * (1.0 + nd(rng));
      storage.push_back(v);
      b.kind = BindKind::Param;
      b.rows = L;
    }
    binds.push_back(b);
    jac.emplace_back(L);
  }
  for (size_t i = 0; i < binds.size(); ++i) {
    binds[i].values = storage[i].data();
    jac_ptrs.push_back(binds[i].kind == BindKind::Param ? jac[i].data() : nullptr);
  }
  std::vector<double> value(L);
  RunRequest rq;
  rq.bindings = binds.data();
  rq.nbind = binds.size();
  rq.S = L;
  rq.N = 1;
  rq.grad = true;
  rq.value_out = value.data();
  rq.jac_out = jac_ptrs.data();
  auto once = [&] {
    if (chunk) bytecode::run(m, x, *chunk, rq);
    else dmci::run(m, x, rq);
  };
  for (int i = 0; i < 20; ++i) once();
  if (const char* it = std::getenv("NDVM_BENCH_ITERS")) {  // fixed work, for instruction counts
    for (int i = 0, n = std::atoi(it); i < n; ++i) once();
    return 0.0;
  }
  // calibrate the batch size to ~20 ms
  int per = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) once();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > 0.02 || per > (1 << 22)) break;
    per *= 2;
  }
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) once();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / per);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2] * 1e6;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PROGRAM LANES dmci|bytecode f64|f32 [consts.txt]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  uint32_t L = uint32_t(std::atoi(argv[2]));
  std::string client = argv[3], dtype = argv[4];
  std::vector<std::pair<std::string, std::vector<double>>> consts;
  if (argc > 5) {
    std::ifstream cf(argv[5]);
    std::string name;
    while (cf >> name) {
      double r, c;
      cf >> r >> c;
      std::vector<double> v{r, c};
      for (int i = 0; i < int(r * (c ? c : 1)); ++i) {
        double e;
        cf >> e;
        v.push_back(e);
      }
      consts.emplace_back(name, v);
    }
  }
  try {
    auto x = expand_program(ss.str(), argv[1]);
    bytecode::Chunk chunk;
    const bytecode::Chunk* cp = nullptr;
    if (client == "bytecode") {
      chunk = bytecode::compile(*x);
      cp = &chunk;
    }
    double us = dtype == "f32" ? bench<float>(*x, cp, L, consts) : bench<double>(*x, cp, L, consts);
    std::printf("%.3f\n", us);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

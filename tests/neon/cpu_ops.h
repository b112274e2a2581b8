// The request of tests/neon/cpu_ops_main.cc as an op's driver sees it, and
// the registry the drivers enter themselves in: each tests/neon/<op>_neon.cc
// runs its CPU kernel's TF-free body on a Request and registers it by name
// (MO_NEON_OP), so that adding an op adds its file and edits no list
// (tests/test_neon_qemu.py compiles every *_neon.cc with the main, as one
// translation unit).
#ifndef MO_TESTS_NEON_CPU_OPS_H_
#define MO_TESTS_NEON_CPU_OPS_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mo_neon {

struct Array {
  int64_t dtype = 4;
  std::vector<unsigned char> bytes;
  int64_t size() const { return int64_t(bytes.size()) / dtype; }
  template <typename T>
  T* data() {
    if (int64_t(sizeof(T)) != dtype) {
      std::fprintf(stderr, "array of dtype %lld read as a %zu-byte type\n", (long long)dtype, sizeof(T));
      std::exit(2);
    }
    return reinterpret_cast<T*>(bytes.data());
  }
};

template <typename T>
Array Zeros(int64_t n) {
  Array a;
  a.dtype = sizeof(T);
  a.bytes.assign(size_t(n) * sizeof(T), 0);
  return a;
}

struct Request {
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<Array> arrays;
  std::vector<Array> outputs;

  int64_t Int(size_t i) const { return Need(i, ints.size(), "integer") ? ints[i] : 0; }
  double Real(size_t i) const { return Need(i, reals.size(), "real") ? reals[i] : 0; }
  template <typename T>
  T* In(size_t i, int64_t want) {
    Need(i, arrays.size(), "array");
    if (arrays[i].size() != want) {
      std::fprintf(stderr, "array %zu has %lld values, expected %lld\n", i, (long long)arrays[i].size(),
                   (long long)want);
      std::exit(2);
    }
    return arrays[i].data<T>();
  }
  template <typename T>
  T* Out(int64_t n) {
    outputs.push_back(Zeros<T>(n));
    return outputs.back().data<T>();
  }
  static bool Need(size_t i, size_t have, const char* what) {
    if (i < have) return true;
    std::fprintf(stderr, "request has %zu %s arguments, needs more than %zu\n", have, what, i);
    std::exit(2);
  }
};

// Runs fn(begin, end) on `shards` contiguous pieces of [0, units), last piece
// first (a schedule unlike one piece per thread, same partition rules).
struct Shards {
  int shards;
  template <typename Fn>
  void operator()(int64_t units, int64_t /*cycles_per_unit*/, const Fn& fn) const {
    for (int s = shards - 1; s >= 0; --s) fn(units * s / shards, units * (s + 1) / shards);
  }
  template <typename Fn>
  void operator()(int64_t units, const Fn& fn) const {
    (*this)(units, 0, fn);
  }
};

using Driver = void (*)(Request*);

struct Registered {
  const char* name;
  Driver run;
};

// The drivers entered so far (in the order of their files' static initialisation).
inline std::vector<Registered>& Drivers() {
  static std::vector<Registered> drivers;
  return drivers;
}

struct Register {
  Register(const char* name, Driver run) { Drivers().push_back({name, run}); }
};

}  // namespace mo_neon

#define MO_NEON_CONCAT_(a, b) a##b
#define MO_NEON_CONCAT(a, b) MO_NEON_CONCAT_(a, b)
// MO_NEON_OP("name", &Driver): `cpu_ops_main name REQUEST RESPONSE` runs Driver.
#define MO_NEON_OP(name, run) const ::mo_neon::Register MO_NEON_CONCAT(kNeonOp, __COUNTER__)(name, run)

#endif  // MO_TESTS_NEON_CPU_OPS_H_

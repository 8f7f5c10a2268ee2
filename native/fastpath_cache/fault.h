// Test-only fault injection: FASTPATH_FAULT_POINT(kLookup) throws std::bad_alloc, as an allocation
// failure would, while that point is armed. Compiled in only with -DFASTPATH_FAULT_INJECTION (the
// C++ test driver, native/tests/test_fastpath_cache.cc); in the library the macro is empty.
#pragma once

#ifdef FASTPATH_FAULT_INJECTION

#include <atomic>
#include <new>

namespace fastpath_cache {
namespace fault {

enum Point { kLookup, kInsert, kWorker, kPointCount };

// How many more passes through each point throw (0: none).
inline std::atomic<int>& Armed(Point point) {
  static std::atomic<int> armed[kPointCount];
  return armed[point];
}
inline void Arm(Point point, int times) { Armed(point).store(times); }
inline void Hit(Point point) {
  std::atomic<int>& armed = Armed(point);
  int left = armed.load();
  while (left > 0) {
    if (armed.compare_exchange_weak(left, left - 1)) throw std::bad_alloc();
  }
}

}  // namespace fault
}  // namespace fastpath_cache

#define FASTPATH_FAULT_POINT(point) ::fastpath_cache::fault::Hit(::fastpath_cache::fault::point)

#else

#define FASTPATH_FAULT_POINT(point) \
  do {                              \
  } while (false)

#endif

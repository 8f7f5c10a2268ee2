// Fault injection, for the C++ test drivers only (-DFASTPATH_FAULT_INJECTION; never in a shipped
// library, where FASTPATH_FAULT_POINT is nothing). A driver sets a hook; it is called with the name of
// each point passed ("execute", "cache.lookup", ...) and may throw (e.g. std::bad_alloc) as an
// allocation there would. Used by both libraries (native/tests/test_dispatcher.cc,
// native/tests/test_fastpath_cache.cc).
#pragma once

#ifdef FASTPATH_FAULT_INJECTION

#include <atomic>

namespace fastpath {

using FaultHook = void (*)(const char* point);

inline std::atomic<FaultHook>& FaultHookSlot() {
  static std::atomic<FaultHook> hook{nullptr};
  return hook;
}
inline void SetFaultHook(FaultHook hook) { FaultHookSlot().store(hook); }
inline void FaultPoint(const char* point) {
  const FaultHook hook = FaultHookSlot().load();
  if (hook != nullptr) hook(point);
}

}  // namespace fastpath

#define FASTPATH_FAULT_POINT(point) ::fastpath::FaultPoint(point)

#else

#define FASTPATH_FAULT_POINT(point) \
  do {                              \
  } while (false)

#endif

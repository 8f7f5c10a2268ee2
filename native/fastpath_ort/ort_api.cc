// Loads onnxruntime at run time and fills OrtFunctions from its OrtApi table (see ort_api.h).
#include "ort_api.h"

#include <dlfcn.h>

#include <mutex>

namespace fastpath {

const OrtSlot kOrtSlots[] = {
#define FASTPATH_ORT_ENTRY(slot, ret, name, params) {slot, #name},
    FASTPATH_ORT_SLOTS(FASTPATH_ORT_ENTRY)
#undef FASTPATH_ORT_ENTRY
};
const size_t kOrtSlotCount = sizeof(kOrtSlots) / sizeof(kOrtSlots[0]);

std::string LoadOrt(const std::string& path, OrtFunctions* fns, std::string* version) {
  // One handle per process: dlopen of the same path returns the same handle anyway, and the
  // library is never closed (sessions and the custom-op libraries it loaded outlive any model).
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return "cannot load onnxruntime from '" + path + "': " + (why ? why : "unknown dlopen error");
  }
  using GetApiBaseFn = const OrtApiBase* (*)();
  auto get_base = reinterpret_cast<GetApiBaseFn>(dlsym(handle, "OrtGetApiBase"));
  if (get_base == nullptr) {
    return "'" + path + "' has no OrtGetApiBase symbol: not an onnxruntime library";
  }
  const OrtApiBase* base = get_base();
  *version = base->GetVersionString ? base->GetVersionString() : "?";
  const void* api = base->GetApi(kOrtApiVersion);
  if (api == nullptr) {
    return "onnxruntime " + *version + " at '" + path + "' does not provide C API version " +
           std::to_string(kOrtApiVersion) + " (onnxruntime >= 1.16 is needed)";
  }
  auto table = static_cast<void* const*>(api);
#define FASTPATH_ORT_FILL(slot, ret, name, params) \
  fns->name = reinterpret_cast<decltype(fns->name)>(table[slot]);
  FASTPATH_ORT_SLOTS(FASTPATH_ORT_FILL)
#undef FASTPATH_ORT_FILL
  return "";
}

std::string TakeOrtError(const OrtFunctions& ort, OrtStatus* status) {
  if (status == nullptr) return "";
  std::string message = ort.GetErrorMessage(status);
  ort.ReleaseStatus(status);
  return message.empty() ? "onnxruntime error (no message)" : message;
}

}  // namespace fastpath

// Triton's cache API for the fastpath cache: the vendored r24.10 headers
// (native/third_party/triton/core, cache API 0.1, server API 1.34: exactly Triton 2.51's), and the
// four entry points the server looks up by name. Nothing is linked: the server that loads the
// library resolves the TRITON* symbols it calls (the pytriton wheel's libtritonserver exports all of
// them; tests/unit/test_cache_plugin_build.py checks that).
#pragma once

#include "triton/core/tritoncache.h"
#include "triton_errors.h"  // FASTPATH_EXPORT

extern "C" {

FASTPATH_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheInitialize(TRITONCACHE_Cache** cache, const char* config);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheFinalize(TRITONCACHE_Cache* cache);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheInsert(TRITONCACHE_Cache* cache, const char* key,
                                                            TRITONCACHE_CacheEntry* entry,
                                                            TRITONCACHE_Allocator* allocator);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONCACHE_CacheLookup(TRITONCACHE_Cache* cache, const char* key,
                                                            TRITONCACHE_CacheEntry* entry,
                                                            TRITONCACHE_Allocator* allocator);

}  // extern "C"

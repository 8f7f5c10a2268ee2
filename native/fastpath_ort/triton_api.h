// Triton's backend API for fastpath_ort: the vendored r24.10 headers (native/third_party/triton/core,
// backend API 1.19, server API 1.34: exactly Triton 2.51's), and the entry points this backend
// exports. Nothing is linked: the server that loads the backend resolves the TRITON* symbols it
// calls (tests/unit/test_native_build.py checks that the wheel's server exports every one).
#pragma once

#include "triton/core/tritonbackend.h"
#include "triton_errors.h"  // FASTPATH_EXPORT

extern "C" {

FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance);
FASTPATH_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                       TRITONBACKEND_Request** requests,
                                                                       const uint32_t request_count);

}  // extern "C"

/* Helpers of jaxdyn's XLA FFI handlers (_uninitialized.c) and kernels (_kernels.c), each
 * compiled into a library of its own (jaxdyn/backend/ffi.py). */
#ifndef JAXDYN_FFI_UTIL_H
#define JAXDYN_FFI_UTIL_H
#include <stddef.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

/* XLA calls a handler once with a metadata extension, when it is registered, to learn the FFI
   API version it was built against; every other call is an execution. Returns 1 for the
   metadata call. */
static int metadata_call(XLA_FFI_CallFrame* frame) {
  for (XLA_FFI_Extension_Base* ext = frame->extension_start; ext != NULL; ext = ext->next) {
    if (ext->type == XLA_FFI_Extension_Metadata) {
      XLA_FFI_Metadata* metadata = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
      metadata->api_version.major_version = XLA_FFI_API_MAJOR;
      metadata->api_version.minor_version = XLA_FFI_API_MINOR;
      metadata->traits = 0;
      return 1;
    }
  }
  return 0;
}

static XLA_FFI_Error* ffi_error(XLA_FFI_CallFrame* frame, const char* message) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message; /* copied by XLA */
  args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
  return frame->api->XLA_FFI_Error_Create(&args);
}

#endif

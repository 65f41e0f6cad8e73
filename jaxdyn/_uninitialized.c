/* jaxdyn's XLA FFI handlers for the CPU (see jaxdyn/_uninitialized.py). Compiled at first use
 * against the running jaxlib's own XLA FFI C header (jax.ffi.include_dir()), so their API
 * version is that jaxlib's.
 *
 * jaxdyn_uninitialized does nothing, so that the one result of its custom call is left as
 * XLA:CPU allocated it (uninitialized): jaxdyn.batching's chunk loop starts its output buffers
 * with it instead of filling them with a constant that every chunk then overwrites; called
 * with results that alias its operands, it stores them (jaxdyn.spatial.store).
 *
 * jaxdyn_check is a value check (jaxdyn._checks.error_if): its last operand is a predicate
 * (PRED, one byte per entry); where any entry is true it fails the program with its string
 * attribute `message`, else it does nothing (its results alias the other operands). */
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

XLA_FFI_Error* jaxdyn_uninitialized(XLA_FFI_CallFrame* frame) {
  metadata_call(frame);
  return NULL; /* success: nothing to do */
}

XLA_FFI_Error* jaxdyn_check(XLA_FFI_CallFrame* frame) {
  if (metadata_call(frame) || frame->args.size < 1)
    return NULL;
  const XLA_FFI_Buffer* pred = (const XLA_FFI_Buffer*)frame->args.args[frame->args.size - 1];
  int64_t n = 1;
  for (int64_t i = 0; i < pred->rank; ++i)
    n *= pred->dims[i];
  const unsigned char* p = (const unsigned char*)pred->data;
  unsigned char failed = 0;
  for (int64_t i = 0; i < n; ++i)
    failed |= p[i];
  if (!failed)
    return NULL;
  char message[2048] = "jaxdyn: a value check failed";
  for (int64_t i = 0; i < frame->attrs.size; ++i) {
    const XLA_FFI_ByteSpan* name = frame->attrs.names[i];
    if (frame->attrs.types[i] == XLA_FFI_AttrType_STRING && name->len == 7
        && memcmp(name->ptr, "message", 7) == 0) {
      const XLA_FFI_ByteSpan* text = (const XLA_FFI_ByteSpan*)frame->attrs.attrs[i];
      size_t len = text->len < sizeof message - 1 ? text->len : sizeof message - 1;
      memcpy(message, text->ptr, len);
      message[len] = 0;
    }
  }
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message; /* copied by XLA */
  args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
  return frame->api->XLA_FFI_Error_Create(&args);
}

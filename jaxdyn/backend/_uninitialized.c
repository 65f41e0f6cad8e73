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

#include "_ffi_util.h"

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
  return ffi_error(frame, message);
}

/* jaxdyn: an XLA FFI handler that does nothing, so that the one result of its custom call is
 * left as XLA:CPU allocated it (uninitialized). jaxdyn.batching's chunk loop starts its output
 * buffers with it instead of filling them with a constant that every chunk then overwrites
 * (see jaxdyn/_uninitialized.py). Compiled at first use against the running jaxlib's own
 * XLA FFI C header (jax.ffi.include_dir()), so its API version is that jaxlib's. */
#include <stddef.h>

#include "xla/ffi/api/c_api.h"

XLA_FFI_Error* jaxdyn_uninitialized(XLA_FFI_CallFrame* frame) {
  /* XLA calls a handler once with a metadata extension, when it is registered, to learn the
     FFI API version it was built against; every other call is an execution: nothing to do. */
  for (XLA_FFI_Extension_Base* ext = frame->extension_start; ext != NULL; ext = ext->next) {
    if (ext->type == XLA_FFI_Extension_Metadata) {
      XLA_FFI_Metadata* metadata = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
      metadata->api_version.major_version = XLA_FFI_API_MAJOR;
      metadata->api_version.minor_version = XLA_FFI_API_MINOR;
      metadata->traits = 0;
    }
  }
  return NULL; /* success */
}

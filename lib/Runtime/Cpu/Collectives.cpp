//===- Collectives.cpp - collective kernels over the communicator ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Runtime/Comm.h"

namespace ds::rt {

bool kAllReduce(KernelContext &ctx) {
  if (!kCopy(ctx)) // the local contribution, unless reduced in place
    return false;
  TensorView &out = ctx.out[0];
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  std::string err;
  if (!ctx.comm->allReduce(out.data, out.numel(), out.dtype,
                           ctx.attrs.getString("reduction", "sum") == "mean",
                           err))
    return ctx.fail(err);
  return true;
}

} // namespace ds::rt

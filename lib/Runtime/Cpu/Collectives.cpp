//===- Collectives.cpp - collective kernels over the communicator ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Runtime/Comm.h"

namespace ds::rt {

bool kAllReduce(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (in.numel() != out.numel() || in.dtype != out.dtype)
    return ctx.fail("all_reduce input and output differ");
  if (out.data != in.data)
    std::memcpy(out.data, in.data, in.numel() * dtypeSize(in.dtype));
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

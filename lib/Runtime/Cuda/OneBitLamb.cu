//===- OneBitLamb.cu - DeepSpeed's 1-bit LAMB step on CUDA ----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The CUDA twin of Cpu/OneBitLamb.cpp (docs/compression.md): the step
// stages the parameter, the gradient and the state through the host and
// runs the CPU arithmetic (oneBitLambStep, Cpu/Lamb.h), whose exchanges go
// over the MPI communicator; the results are copied back. Correct, not
// fast: every step moves the tensor's state both ways over PCIe. Compiled
// by nvcc; not run on a GPU yet.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "Cpu/Lamb.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"

#include <vector>

namespace ds::rt::cuda {
namespace {

bool kOneBitLamb(KernelContext &ctx) {
  if (ctx.in.size() == 7) // ds.onebit_lamb_local (Cpu/OneBitLamb.cpp)
    return ctx.fail("onebit_lamb under ZeRO 1-3 runs on CPU ranks only (its "
                    "CUDA twin is not built yet)");
  if (ctx.in.size() != 9 || ctx.out.size() != 7)
    return ctx.fail("onebit_lamb expects 9 operands and 7 results");
  int world = ctx.comm ? ctx.comm->size() : 1;
  int64_t n = ctx.in[0].numel(), padded = ctx.in[5].numel();
  for (int i = 0; i < 8; ++i)
    if (ctx.in[i].dtype != DType::F32)
      return ctx.fail("onebit_lamb operands must be f32");
  for (int i : {1, 2, 3, 4})
    if (ctx.in[i].numel() != n)
      return ctx.fail("onebit_lamb: gradient, moments and fresh variance "
                      "must have the parameter's size");
  if (padded != ::ds::onebit::paddedSize(n, world) ||
      ctx.in[6].numel() * world != padded || ctx.in[7].numel() != 2 ||
      ctx.in[8].dtype != DType::I64)
    return ctx.fail("onebit_lamb: error buffers of " + std::to_string(padded) +
                    " elements do not pad " + std::to_string(n) +
                    " elements for " + std::to_string(world) +
                    " ranks, or coeffs are not 2 f32");
  int64_t t = 0;
  if (!readBack(ctx, &t, ctx.in[8].data, 8))
    return false;
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  // The state (results 0-6: operands 0 and 2-7) and the gradient on the
  // host.
  std::vector<float> h[7], g;
  for (int i = 0; i < 7; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    if (!toHost(ctx, h[i], in.as<float>(), in.numel()))
      return false;
  }
  if (!toHost(ctx, g, ctx.in[1].as<float>(), n))
    return false;
  OneBitLambState s{h[0].data(), h[1].data(), h[2].data(), h[3].data(),
                    h[4].data(), h[5].data(), h[6].data(), n, padded};
  if (!oneBitLambStep(ctx, g.data(), t, s))
    return false;
  for (int i = 0; i < 7; ++i)
    if (!fromHost(ctx, ctx.out[i].data, h[i].data(),
                  h[i].size() * sizeof(float)))
      return false;
  return true;
}
} // namespace

void registerOneBitLambKernels(KernelRegistry &r) {
  r.add("onebit_lamb", kOneBitLamb);
}

} // namespace ds::rt::cuda

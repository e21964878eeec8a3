//===- MultiTensor.cpp - multi-tensor Adam, AdamW and SGD -----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `multi_adam` and `multi_sgd` (ds.multi_adam, ds.multi_sgd; made by
// --ds-fuse-optimizer): the updates of N parameters in one call. The N
// tensors are one flat index space of their summed sizes, cut into chunks
// of kChunk elements that parallelFor deals over the run's threads; a chunk
// crossing a tensor's end runs the rest of it in the next tensor. Each
// element gets the single kernel's arithmetic (Adam.h), so the results are
// the bits of N `adam` (`sgd`) calls.
//
// Operands: N params, N gradients, N of each state (Adam: exp_avg, then
// exp_avg_sq; SGD with momentum: the buffers), the step; outputs: N new
// params, then N of each new state.
//
//===----------------------------------------------------------------------===//

#include "Adam.h"
#include "Kernels.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace ds::rt {
namespace {

/// Elements per chunk of the flat index space (the single kernels' grain).
constexpr int64_t kChunk = 16384;

/// The operands of one multi-tensor call, checked: `n` tensors with
/// `states` state tensors each.
struct MultiTensorView {
  int64_t n = 0, states = 0, t = 0;
  std::vector<int64_t> start; // flat index of each tensor's first element
  int64_t total = 0;
};

bool checkMultiTensor(KernelContext &ctx, int64_t states, MultiTensorView &mt) {
  int64_t ins = static_cast<int64_t>(ctx.in.size());
  int64_t outs = static_cast<int64_t>(ctx.out.size());
  if ((ins - 1) % (2 + states) != 0 || (ins - 1) / (2 + states) != outs / (1 + states) ||
      outs % (1 + states) != 0 || ins < 3)
    return ctx.fail("multi-tensor optimizer: " + std::to_string(ins) +
                    " inputs and " + std::to_string(outs) +
                    " outputs do not make N parameters with " +
                    std::to_string(states) + " states each");
  mt.n = (ins - 1) / (2 + states);
  mt.states = states;
  for (int64_t i = 0; i < mt.n; ++i) {
    int64_t size = ctx.in[i].numel();
    for (int64_t g = 0; g < 2 + states; ++g) {
      const TensorView &v = ctx.in[g * mt.n + i];
      if (v.dtype != DType::F32 || v.numel() != size)
        return ctx.fail("multi-tensor optimizer: operands of parameter " +
                        std::to_string(i) +
                        " must be f32 of the parameter's size");
    }
    for (int64_t r = 0; r < 1 + states; ++r)
      if (ctx.out[r * mt.n + i].numel() != size)
        return ctx.fail("multi-tensor optimizer: output " +
                        std::to_string(r * mt.n + i) +
                        " is not of its parameter's size");
    mt.start.push_back(mt.total);
    mt.total += size;
  }
  const TensorView &step = ctx.in.back();
  if (step.numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  mt.t = loadI(step.data, step.dtype, 0);
  return true;
}

/// On a step whose gradients overflowed (fp16 loss scaling) nothing
/// changes: outputs that are not their inputs' storage get the inputs.
bool keepOnOverflow(KernelContext &ctx, const MultiTensorView &mt) {
  if (!ctx.step || !ctx.step->overflow)
    return false;
  for (int64_t r = 0; r < 1 + mt.states; ++r)
    for (int64_t i = 0; i < mt.n; ++i) {
      // Output group r is the param (r = 0) or state r - 1, whose input
      // group is 0 or r + 1 (the gradients are group 1).
      const TensorView &in = ctx.in[(r == 0 ? 0 : r + 1) * mt.n + i];
      TensorView &out = ctx.out[r * mt.n + i];
      if (in.data != out.data)
        std::memcpy(out.data, in.data, in.numel() * sizeof(float));
    }
  return true;
}

/// Runs fn(i, begin, end) on the pieces of tensors that the flat range of
/// each chunk covers, the chunks spread over the run's threads.
template <typename Fn>
void forEachPiece(const MultiTensorView &mt, Fn fn) {
  int64_t chunks = (mt.total + kChunk - 1) / kChunk;
  parallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    int64_t b = c0 * kChunk, e = std::min(mt.total, c1 * kChunk);
    // The tensor holding flat index b: the last whose start is <= b.
    int64_t i = std::upper_bound(mt.start.begin(), mt.start.end(), b) -
                mt.start.begin() - 1;
    while (b < e) {
      int64_t end = i + 1 < mt.n ? mt.start[i + 1] : mt.total;
      int64_t stop = std::min(e, end);
      if (stop > b)
        fn(i, b - mt.start[i], stop - mt.start[i]);
      b = stop;
      ++i;
    }
  });
}

} // namespace

bool kMultiAdam(KernelContext &ctx) {
  MultiTensorView mt;
  if (!checkMultiTensor(ctx, 2, mt))
    return false;
  if (mt.t < 1)
    return ctx.fail("optimizer step " + std::to_string(mt.t) + " is not >= 1");
  if (keepOnOverflow(ctx, mt))
    return true;
  AdamCoefficients k = adamCoefficients(ctx, mt.t);
  int64_t n = mt.n;
  forEachPiece(mt, [&](int64_t i, int64_t b, int64_t e) {
    adamRange(k, ctx.in[i].as<float>() + b, ctx.in[n + i].as<float>() + b,
              ctx.in[2 * n + i].as<float>() + b,
              ctx.in[3 * n + i].as<float>() + b, ctx.out[i].as<float>() + b,
              ctx.out[n + i].as<float>() + b,
              ctx.out[2 * n + i].as<float>() + b, e - b);
  });
  return true;
}

bool kMultiSgd(KernelContext &ctx) {
  bool momentum = ctx.attrs.getFloat("momentum", 0.0) != 0.0;
  MultiTensorView mt;
  if (!checkMultiTensor(ctx, momentum ? 1 : 0, mt))
    return false;
  if (keepOnOverflow(ctx, mt))
    return true;
  SgdCoefficients k = sgdCoefficients(ctx, mt.t);
  int64_t n = mt.n;
  forEachPiece(mt, [&](int64_t i, int64_t b, int64_t e) {
    const float *B = momentum ? ctx.in[2 * n + i].as<float>() + b : nullptr;
    float *Bo = momentum ? ctx.out[n + i].as<float>() + b : nullptr;
    sgdRange(k, ctx.in[i].as<float>() + b, ctx.in[n + i].as<float>() + b, B,
             ctx.out[i].as<float>() + b, Bo, e - b);
  });
  return true;
}

void registerMultiTensorKernels(KernelRegistry &r) {
  r.add("multi_adam", kMultiAdam);
  r.add("multi_sgd", kMultiSgd);
}

} // namespace ds::rt

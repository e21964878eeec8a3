//===- MultiTensor.cu - multi-tensor Adam, AdamW and SGD on CUDA ----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The CUDA twins of Cpu/MultiTensor.cpp: one launch updates N tensors. A
// table of the N tensors' pointers and flat start indices is copied to the
// device; each thread of the grid-stride loop over the summed sizes finds
// its tensor by binary search and applies the single kernels' arithmetic
// (Optimizers.cu's adamKernel and sgdKernel, element for element).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "Cpu/Adam.h"

#include <cstring>
#include <vector>

namespace ds::rt::cuda {
namespace {

/// Up to four inputs and three outputs per tensor (Adam: P, G, M, V; Po,
/// Mo, Vo), and where the tensor starts in the flat index space.
struct TensorPointers {
  const float *in[4];
  float *out[3];
  int64_t start;
};

__device__ inline int64_t tensorOf(const TensorPointers *table, int64_t n,
                                   int64_t flat) {
  int64_t lo = 0, hi = n - 1; // the last tensor whose start is <= flat
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (table[mid].start <= flat)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void multiAdamKernel(const TensorPointers *table, int64_t n,
                                int64_t total, AdamCoefficients k) {
  DS_GRID_LOOP(f, total) {
    const TensorPointers &t = table[tensorOf(table, n, f)];
    int64_t i = f - t.start;
    float p = t.in[0][i], gr = t.in[1][i];
    if (k.decayed) {
      if (k.decoupled)
        p = p * k.decay;
      else
        gr = gr + k.wd * p;
    }
    float m = t.in[2][i] * k.b1 + gr * k.a1;
    float v = t.in[3][i] * k.b2 + k.a2 * gr * gr;
    float denom = sqrtf(v) / k.bc2Sqrt + k.eps;
    t.out[1][i] = m;
    t.out[2][i] = v;
    t.out[0][i] = p + (-k.stepSize) * (m / denom);
  }
}

__global__ void multiSgdKernel(const TensorPointers *table, int64_t n,
                               int64_t total, SgdCoefficients k) {
  DS_GRID_LOOP(f, total) {
    const TensorPointers &t = table[tensorOf(table, n, f)];
    int64_t i = f - t.start;
    float d = t.in[1][i];
    if (k.wd != 0.0f)
      d = d + k.wd * t.in[0][i];
    if (k.useMomentum) {
      float buf = k.firstStep ? d
                              : t.in[2][i] * k.momentum + (1.0f - k.dampening) * d;
      t.out[1][i] = buf;
      d = k.nesterov ? d + k.momentum * buf : buf;
    }
    t.out[0][i] = t.in[0][i] + (-k.lr) * d;
  }
}

/// The table of N tensors with `states` states each, checked; `t` the step.
bool tableOf(KernelContext &ctx, int64_t states,
             std::vector<TensorPointers> &table, int64_t &total, int64_t &t) {
  int64_t ins = static_cast<int64_t>(ctx.in.size());
  int64_t outs = static_cast<int64_t>(ctx.out.size());
  int64_t n = (ins - 1) / (2 + states);
  if (ins < 3 || (ins - 1) % (2 + states) != 0 || outs != n * (1 + states))
    return ctx.fail("multi-tensor optimizer: " + std::to_string(ins) +
                    " inputs and " + std::to_string(outs) +
                    " outputs do not make N parameters with " +
                    std::to_string(states) + " states each");
  total = 0;
  for (int64_t i = 0; i < n; ++i) {
    TensorPointers p;
    std::memset(&p, 0, sizeof p);
    int64_t size = ctx.in[i].numel();
    for (int64_t g = 0; g < 2 + states; ++g) {
      const TensorView &v = ctx.in[g * n + i];
      if (v.dtype != DType::F32 || v.numel() != size)
        return ctx.fail("multi-tensor optimizer: operands of parameter " +
                        std::to_string(i) +
                        " must be f32 of the parameter's size");
      p.in[g] = v.as<float>();
    }
    for (int64_t r = 0; r < 1 + states; ++r) {
      if (ctx.out[r * n + i].numel() != size)
        return ctx.fail("multi-tensor optimizer: output " +
                        std::to_string(r * n + i) +
                        " is not of its parameter's size");
      p.out[r] = ctx.out[r * n + i].as<float>();
    }
    p.start = total;
    total += size;
    table.push_back(p);
  }
  if (ctx.in.back().numel() != 1 || ctx.in.back().dtype != DType::I64)
    return ctx.fail("optimizer step must be an i64 scalar");
  return readBack(ctx, &t, ctx.in.back().data, sizeof t);
}

/// An overflowed step (fp16 loss scaling) keeps parameters and states.
bool keepOnOverflow(KernelContext &ctx, const std::vector<TensorPointers> &table,
                    int64_t states, bool &kept) {
  kept = ctx.step && ctx.step->overflow;
  if (!kept)
    return true;
  int64_t n = static_cast<int64_t>(table.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < 1 + states; ++r) {
      int64_t size = ctx.in[i].numel();
      if (!copyDevice(ctx, table[i].in[r == 0 ? 0 : r + 1], table[i].out[r],
                      size * sizeof(float)))
        return false;
    }
  return true;
}

/// Copies the table to the device and launches `kernel` over `total`.
template <typename Kernel, typename Coefficients>
bool launchOverTable(KernelContext &ctx,
                     const std::vector<TensorPointers> &table, int64_t total,
                     Kernel kernel, const Coefficients &k) {
  if (total == 0)
    return true;
  size_t bytes = table.size() * sizeof(TensorPointers);
  Scratch device(bytes);
  if (!device.p)
    return ctx.fail("CUDA: no memory for the multi-tensor table");
  if (!fromHost(ctx, device.p, table.data(), bytes))
    return false;
  kernel<<<blocksFor(total), 256, 0, gStream>>>(
      device.as<TensorPointers>(), static_cast<int64_t>(table.size()), total,
      k);
  return launched(ctx);
}

bool kMultiAdam(KernelContext &ctx) {
  std::vector<TensorPointers> table;
  int64_t total = 0, t = 0;
  if (!tableOf(ctx, 2, table, total, t))
    return false;
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  bool kept = false;
  if (!keepOnOverflow(ctx, table, 2, kept))
    return false;
  if (kept)
    return launched(ctx);
  return launchOverTable(ctx, table, total, multiAdamKernel,
                         adamCoefficients(ctx, t));
}

bool kMultiSgd(KernelContext &ctx) {
  bool momentum = ctx.attrs.getFloat("momentum", 0.0) != 0.0;
  int64_t states = momentum ? 1 : 0;
  std::vector<TensorPointers> table;
  int64_t total = 0, t = 0;
  if (!tableOf(ctx, states, table, total, t))
    return false;
  bool kept = false;
  if (!keepOnOverflow(ctx, table, states, kept))
    return false;
  if (kept)
    return launched(ctx);
  return launchOverTable(ctx, table, total, multiSgdKernel,
                         sgdCoefficients(ctx, t));
}

} // namespace

void registerMultiTensorKernels(KernelRegistry &r) {
  r.add("multi_adam", kMultiAdam);
  r.add("multi_sgd", kMultiSgd);
}

} // namespace ds::rt::cuda

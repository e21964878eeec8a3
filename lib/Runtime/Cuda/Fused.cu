//===- Fused.cu - the fused elementwise CUDA kernel -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twin of Cpu/Fused.cpp: one thread per output element (grid-stride),
// each input read through its broadcast strides, the program
// (include/ds/Support/FusedProgram.h) interpreted in per-thread registers.
// f32 math with CUDA's functions (the CPU uses Vec.h's approximations:
// results agree within their error, not bit for bit). The operands'
// description (shape, strides, dtypes, pointers, program, constants) goes
// to the device in one scratch buffer.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Support/FusedProgram.h"

#include <cstring>

namespace ds::rt::cuda {
namespace {

/// Registers per thread; the compiler's --ds-fuse-elementwise keeps inputs
/// plus instructions at or below it.
constexpr int kMaxRegisters = 64;

/// The description's layout (int64 words): rank, inputs, instructions,
/// shape[rank], strides[inputs][rank], dtypes[inputs], pointers[inputs],
/// program[4 * instructions], then the constants (f32, one per word).
__global__ void fusedKernel(const int64_t *desc, int64_t n, float *out) {
  int rank = static_cast<int>(desc[0]);
  int numIn = static_cast<int>(desc[1]), numIns = static_cast<int>(desc[2]);
  const int64_t *shape = desc + 3, *strides = shape + rank,
                *dtypes = strides + int64_t(numIn) * rank,
                *ptrs = dtypes + numIn, *program = ptrs + numIn,
                *constWords = program + 4 * int64_t(numIns);
  float reg[kMaxRegisters];
  DS_GRID_LOOP(i, n) {
    for (int k = 0; k < numIn; ++k) {
      int64_t off = 0, r = i;
      for (int d = rank - 1; d >= 0; --d) {
        off += (r % shape[d]) * strides[int64_t(k) * rank + d];
        r /= shape[d];
      }
      const void *p = reinterpret_cast<const void *>(ptrs[k]);
      reg[k] = dtypes[k] == 1 ? static_cast<const float *>(p)[off]
                              : (static_cast<const uint8_t *>(p)[off] ? 1.0f : 0.0f);
    }
    float result = 0.0f;
    for (int q = 0; q < numIns; ++q) {
      const int64_t *ins = program + 4 * q;
      float v[3];
      for (int j = 0; j < 3; ++j) {
        int64_t ref = ins[1 + j];
        v[j] = ref < 0 ? __int_as_float(static_cast<int>(constWords[-ref - 1]))
                       : reg[ref];
      }
      float a = v[0], b = v[1], y = 0.0f;
      switch (static_cast<FusedOp>(ins[0])) {
      case FusedOp::Add: y = a + b; break;
      case FusedOp::Sub: y = a - b; break;
      case FusedOp::Mul: y = a * b; break;
      case FusedOp::Div: y = a / b; break;
      case FusedOp::Pow: y = b == 2.0f ? a * a : (b == 0.5f ? sqrtf(a) : powf(a, b)); break;
      case FusedOp::Max: y = isnan(a) || isnan(b) ? NAN : fmaxf(a, b); break;
      case FusedOp::Min: y = isnan(a) || isnan(b) ? NAN : fminf(a, b); break;
      case FusedOp::Neg: y = -a; break;
      case FusedOp::Abs: y = fabsf(a); break;
      case FusedOp::Exp: y = expf(a); break;
      case FusedOp::Log: y = logf(a); break;
      case FusedOp::Sqrt: y = sqrtf(a); break;
      case FusedOp::Reciprocal: y = 1.0f / a; break;
      case FusedOp::Erf: y = erff(a); break;
      case FusedOp::Tanh: y = tanhf(a); break;
      case FusedOp::Relu: y = a < 0.0f ? 0.0f : a; break;
      case FusedOp::Sigmoid: y = 1.0f / (1.0f + expf(-a)); break;
      case FusedOp::Where: y = a != 0.0f ? b : v[2]; break;
      }
      reg[numIn + q] = y;
      result = y;
    }
    out[i] = result;
  }
}

bool kFusedElementwise(KernelContext &ctx) {
  std::vector<int64_t> program = ctx.attrs.getInts("program");
  std::vector<double> constants = ctx.attrs.getFloats("constants");
  TensorView &o = ctx.out[0];
  if (o.dtype != DType::F32)
    return ctx.fail("fused_elementwise: the result is not f32");
  std::vector<bool> mask;
  std::vector<const TensorView *> ins;
  for (const TensorView &t : ctx.in) {
    if (t.dtype != DType::F32 && t.dtype != DType::Bool)
      return ctx.fail("fused_elementwise: an input is neither f32 nor bool");
    mask.push_back(t.dtype == DType::Bool);
    ins.push_back(&t);
  }
  std::string error = checkFusedProgram(program, mask, constants.size());
  if (!error.empty())
    return ctx.fail("fused_elementwise: " + error);
  int64_t numIns = program.size() / 4, numIn = ctx.in.size();
  if (numIn + numIns > kMaxRegisters)
    return ctx.fail("fused_elementwise: more than 64 registers");
  if (o.rank() > kMaxRank)
    return ctx.fail("fused_elementwise: rank above 8");
  int64_t n = o.numel();
  if (n == 0)
    return true;
  std::vector<int64_t> desc = {o.rank(), numIn, numIns};
  desc.insert(desc.end(), o.shape.begin(), o.shape.end());
  for (const TensorView *t : ins) {
    // Broadcast strides, numpy rules (checked against the result's shape).
    std::vector<int64_t> s(o.rank(), 0);
    int64_t stride = 1;
    for (int64_t d = o.rank() - 1, e = t->rank() - 1; d >= 0; --d, --e) {
      int64_t dim = e >= 0 ? t->shape[e] : 1;
      if (dim != 1 && dim != o.shape[d])
        return ctx.fail("fused_elementwise: an input does not broadcast");
      s[d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    desc.insert(desc.end(), s.begin(), s.end());
  }
  for (const TensorView *t : ins)
    desc.push_back(t->dtype == DType::F32 ? 1 : 6);
  for (const TensorView *t : ins)
    desc.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t->data)));
  desc.insert(desc.end(), program.begin(), program.end());
  for (double c : constants) {
    float f = static_cast<float>(c);
    int32_t bits;
    std::memcpy(&bits, &f, 4);
    desc.push_back(bits);
  }
  Scratch dev(desc.size() * sizeof(int64_t));
  if (!dev.p)
    return ctx.fail("fused_elementwise: no device memory for the program");
  // Pageable source: the call returns once the words are staged.
  if (cudaMemcpyAsync(dev.p, desc.data(), desc.size() * sizeof(int64_t),
                      cudaMemcpyHostToDevice, gStream) != cudaSuccess)
    return launched(ctx);
  fusedKernel<<<blocksFor(n), 256, 0, gStream>>>(dev.as<int64_t>(), n,
                                                 o.as<float>());
  return launched(ctx);
}

} // namespace

void registerFusedKernels(KernelRegistry &r) {
  r.add("fused_elementwise", kFusedElementwise);
}

} // namespace ds::rt::cuda

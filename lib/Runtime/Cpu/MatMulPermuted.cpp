//===- MatMulPermuted.cpp - matmul with permuted operands on CPU ----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The matmul kernel's path for operands the compiler left untransposed
// (`perm_a` / `perm_b`, --ds-fold-transpose): one sgemm per batch with the
// operands' strides (attention's [B, T, H, d] read as [B, H, T, d] has
// leading dimension H*d), no transposed copy. f32 only: the compiler folds
// no 16-bit operand this way.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "../PermutedGemm.h"

#include <cblas.h>

#include <algorithm>

namespace ds::rt {

bool kMatMulPermuted(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  if (a.dtype != DType::F32 || b.dtype != DType::F32 || o.dtype != DType::F32)
    return ctx.fail("a matmul with permuted operands (perm_a/perm_b) is f32 "
                    "only");
  PermutedGemm g;
  if (!planPermutedGemm(ctx, a, b, o, g))
    return false;
  const float *A = a.as<float>(), *B = b.as<float>();
  float *C = o.as<float>();
  if (g.M * g.N * g.K == 0) {
    std::fill(C, C + g.batches * g.M * g.N, 0.0f);
    return true;
  }
  for (int64_t bi = 0; bi < g.batches; ++bi) {
    int64_t oa, ob;
    g.offsets(bi, oa, ob);
    cblas_sgemm(CblasRowMajor, g.a.trans ? CblasTrans : CblasNoTrans,
                g.b.trans ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, 1.0f,
                A + oa, g.a.ld, B + ob, g.b.ld, 0.0f, C + bi * g.M * g.N, g.N);
  }
  return true;
}

} // namespace ds::rt

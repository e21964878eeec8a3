//===- PermutedGemm.h - matmul operands read through a permutation -------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// --ds-fold-transpose hands the matmul kernel a transposed operand as its
// untransposed buffer and the permutation (`perm_a` / `perm_b`: the operand
// is transpose(buffer, perm)). This header turns the two operands into the
// GEMM's geometry: M, N, K, each operand's leading dimension and
// transposition, and element strides per broadcast batch dimension. Shapes
// only (the CPU kernel and its CUDA twin share it).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_PERMUTEDGEMM_H
#define DS_RUNTIME_PERMUTEDGEMM_H

#include "Kernel.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ds::rt {

/// One operand as the GEMM reads it: the permuted shape and, per dimension,
/// the element stride into its buffer.
struct GemmOperand {
  std::vector<int64_t> shape, strides;
  bool trans = false; // the buffer holds the matrix column-major
  int64_t ld = 0;     // its leading dimension
};

/// A matmul's batched GEMM: C[batch..., M, N] (row-major) from A and B.
struct PermutedGemm {
  int64_t M = 0, N = 0, K = 0, batches = 1;
  GemmOperand a, b;
  std::vector<int64_t> batch, strideA, strideB; // per batch dimension

  /// Element offsets of batch `bi` (row-major over `batch`) into A and B.
  void offsets(int64_t bi, int64_t &oa, int64_t &ob) const {
    oa = ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t i = bi % batch[d];
      bi /= batch[d];
      oa += i * strideA[d];
      ob += i * strideB[d];
    }
  }
};

/// True if the compiler folded a permutation into an operand (perm_a/perm_b).
inline bool hasOperandPerm(const KernelContext &ctx) {
  return ctx.attrs.has("perm_a") || ctx.attrs.has("perm_b");
}

/// `t` read as transpose(t, perm) (swapping the last two dimensions when
/// `trans`, as is when neither); the last two dimensions must include the
/// buffer's unit-stride one.
inline bool gemmOperand(KernelContext &ctx, const TensorView &t,
                        std::vector<int64_t> perm, bool trans,
                        const char *which, GemmOperand &g) {
  int64_t r = t.rank();
  if (r < 2)
    return ctx.fail(std::string("a permuted matmul needs matrix operands (") +
                    which + " has rank " + std::to_string(r) + ")");
  if (perm.empty()) {
    for (int64_t i = 0; i < r; ++i)
      perm.push_back(i);
    if (trans)
      std::swap(perm[r - 1], perm[r - 2]);
  }
  std::vector<bool> seen(r, false);
  if (static_cast<int64_t>(perm.size()) != r)
    return ctx.fail(std::string("matmul ") + which + " permutation has " +
                    std::to_string(perm.size()) + " entries for rank " +
                    std::to_string(r));
  std::vector<int64_t> bufStride(r, 1);
  for (int64_t d = r - 1; d > 0; --d)
    bufStride[d - 1] = bufStride[d] * t.shape[d];
  g.shape.assign(r, 0);
  g.strides.assign(r, 0);
  for (int64_t d = 0; d < r; ++d) {
    int64_t p = perm[d];
    if (p < 0 || p >= r || seen[p])
      return ctx.fail(std::string("matmul ") + which +
                      " permutation is not a permutation");
    seen[p] = true;
    g.shape[d] = t.shape[p];
    g.strides[d] = bufStride[p];
  }
  int64_t rows = g.shape[r - 2], cols = g.shape[r - 1];
  int64_t sRow = g.strides[r - 2], sCol = g.strides[r - 1];
  if (sCol == 1 || cols == 1) {
    g.trans = false;
    g.ld = std::max<int64_t>(rows == 1 ? cols : sRow, std::max<int64_t>(cols, 1));
    if (rows > 1 && sRow < cols)
      return ctx.fail(std::string("matmul ") + which + " rows overlap");
  } else if (sRow == 1 || rows == 1) {
    g.trans = true;
    g.ld = std::max<int64_t>(cols == 1 ? rows : sCol, std::max<int64_t>(rows, 1));
    if (cols > 1 && sCol < rows)
      return ctx.fail(std::string("matmul ") + which + " columns overlap");
  } else {
    return ctx.fail(std::string("matmul ") + which +
                    " permutation moves the unit-stride dimension out of the "
                    "last two");
  }
  return true;
}

/// The geometry of a matmul with perm_a/perm_b (and trans_a/trans_b) over
/// its inputs and result `o`.
inline bool planPermutedGemm(KernelContext &ctx, const TensorView &a,
                             const TensorView &b, const TensorView &o,
                             PermutedGemm &g) {
  if (!gemmOperand(ctx, a, ctx.attrs.getInts("perm_a"),
                   ctx.attrs.getInt("trans_a", 0) != 0, "A", g.a) ||
      !gemmOperand(ctx, b, ctx.attrs.getInts("perm_b"),
                   ctx.attrs.getInt("trans_b", 0) != 0, "B", g.b))
    return false;
  size_t ra = g.a.shape.size(), rb = g.b.shape.size();
  g.M = g.a.shape[ra - 2];
  g.K = g.a.shape[ra - 1];
  g.N = g.b.shape[rb - 1];
  if (g.b.shape[rb - 2] != g.K)
    return ctx.fail("matmul contraction mismatch");
  size_t r = std::max(ra, rb) - 2;
  g.batch.assign(r, 1);
  g.strideA.assign(r, 0);
  g.strideB.assign(r, 0);
  for (size_t i = 0; i < r; ++i) {
    int64_t ia = static_cast<int64_t>(i) - static_cast<int64_t>(r - (ra - 2));
    int64_t ib = static_cast<int64_t>(i) - static_cast<int64_t>(r - (rb - 2));
    int64_t da = ia < 0 ? 1 : g.a.shape[ia], db = ib < 0 ? 1 : g.b.shape[ib];
    if (da != db && da != 1 && db != 1)
      return ctx.fail("matmul batch dimensions do not broadcast");
    g.batch[i] = std::max(da, db);
    g.strideA[i] = da == 1 ? 0 : g.a.strides[ia];
    g.strideB[i] = db == 1 ? 0 : g.b.strides[ib];
    g.batches *= g.batch[i];
  }
  if (g.batches * g.M * g.N != o.numel())
    return ctx.fail("matmul result size does not match its operands");
  return true;
}

} // namespace ds::rt

#endif // DS_RUNTIME_PERMUTEDGEMM_H

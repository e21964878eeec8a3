//===- TopK.h - the order of ds.topk, shared by its kernels ------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The one order in which ds.topk selects: the larger value first (with
// `largest`, else the smaller), a NaN larger than any number, and among
// equal values the lower index first. The CPU kernel (Cpu/TopK.cpp) and
// its CUDA twin (Cuda/TopK.cu) both select with it, so they agree element
// by element.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_TOPK_H
#define DS_SUPPORT_TOPK_H

#include <cstdint>

#ifdef __CUDACC__
#define DS_TOPK_HD __host__ __device__
#else
#define DS_TOPK_HD
#endif

namespace ds {

/// Whether (a, ia) comes before (b, ib) in ds.topk's order.
DS_TOPK_HD inline bool topkBefore(float a, int64_t ia, float b, int64_t ib,
                                  bool largest) {
  bool na = a != a, nb = b != b; // NaN
  if (na || nb) {
    if (na && nb)
      return ia < ib;
    return largest ? na : nb; // NaN first when largest, last when smallest
  }
  if (a != b)
    return largest ? a > b : a < b;
  return ia < ib;
}

/// A ds.topk row geometry: `outer` x `n` x `inner` elements, `k` kept.
struct TopKGeometry {
  int64_t outer = 1, n = 0, inner = 1, k = 0;
  /// Sets it from a shape of `rank` dimensions; false when `axis` or `k`
  /// is out of range.
  bool set(const int64_t *shape, int64_t rank, int64_t axis, int64_t kk) {
    if (axis < 0 || axis >= rank)
      return false;
    outer = inner = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= shape[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= shape[d];
    n = shape[axis];
    k = kk;
    return k >= 1 && k <= n;
  }
  /// Sets it for ds.topk_grad: `grad` (rank `rank`) is the result `whole`
  /// with k along `axis`; false when they do not fit.
  bool setGrad(const int64_t *whole, const int64_t *grad, int64_t rank,
               int64_t axis) {
    if (axis < 0 || axis >= rank)
      return false;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && whole[d] != grad[d])
        return false;
    return set(whole, rank, axis, grad[axis]);
  }
  DS_TOPK_HD int64_t rows() const { return outer * inner; }
  /// Element j along the axis of row r, in the whole tensor (width `len`
  /// along the axis: n for the input, k for the selection).
  DS_TOPK_HD int64_t at(int64_t r, int64_t j, int64_t len) const {
    return ((r / inner) * len + j) * inner + r % inner;
  }
};

} // namespace ds

#undef DS_TOPK_HD

#endif // DS_SUPPORT_TOPK_H

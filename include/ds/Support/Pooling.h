//===- Pooling.h - the window geometry of max and average pooling -*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM; also compiled by nvcc).
//
// ds.max_pool and ds.avg_pool (and their gradients) slide a window over
// the spatial dimensions of an (N, C, spatial...) tensor, 1 to 3 of them.
// The verifier, the importer, the CPU and the CUDA kernels share this one
// description: the output size rule (ONNX's and PyTorch's, ceil_mode
// included: a last window that would start in the end padding is dropped)
// and the geometry padded to three spatial dimensions (leading ones of
// size 1), so that every kernel is one loop nest.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_POOLING_H
#define DS_SUPPORT_POOLING_H

#include <cstdint>

#ifdef __CUDACC__
#define DS_POOL_HD __host__ __device__
#else
#define DS_POOL_HD
#endif

namespace ds {

/// The spatial dimensions pooling supports.
constexpr int kMaxPoolDims = 3;

/// The output size of one spatial dimension: `in` elements, `begin` and
/// `end` padding, a window of `kernel` taps `dilation` apart, moved by
/// `stride`. Non-positive when no window fits.
inline int64_t pooledSize(int64_t in, int64_t kernel, int64_t stride,
                          int64_t begin, int64_t end, int64_t dilation,
                          bool ceilMode) {
  int64_t span = (kernel - 1) * dilation + 1;
  int64_t room = in + begin + end - span;
  if (room < 0)
    return 0;
  int64_t out = (ceilMode ? (room + stride - 1) / stride : room / stride) + 1;
  // The last window must start inside the input or its begin padding.
  if (ceilMode && (out - 1) * stride >= in + begin)
    --out;
  return out;
}

/// One pooling's geometry over three spatial dimensions (outermost first;
/// fewer dimensions lead with size-1 ones, kernel 1, no padding).
struct PoolGeometry {
  int64_t planes = 0; // N * C
  int64_t in[kMaxPoolDims] = {1, 1, 1}, out[kMaxPoolDims] = {1, 1, 1};
  int64_t kernel[kMaxPoolDims] = {1, 1, 1}, stride[kMaxPoolDims] = {1, 1, 1};
  int64_t pad[kMaxPoolDims] = {0, 0, 0}, padEnd[kMaxPoolDims] = {0, 0, 0};
  int64_t dilation[kMaxPoolDims] = {1, 1, 1};
  bool countIncludePad = false;

  DS_POOL_HD int64_t inPlane() const { return in[0] * in[1] * in[2]; }
  DS_POOL_HD int64_t outPlane() const { return out[0] * out[1] * out[2]; }

  /// Fills the geometry of a rank-(2 + nd) input and output from the
  /// attributes (`pads` begins then ends; null strides, pads or dilations
  /// mean 1, 0 and 1). False on a rank it cannot pool.
  bool set(const int64_t *inShape, const int64_t *outShape, int nd,
           const int64_t *kernels, const int64_t *strides,
           const int64_t *pads, const int64_t *dilations) {
    if (nd < 1 || nd > kMaxPoolDims)
      return false;
    planes = inShape[0] * inShape[1];
    int lead = kMaxPoolDims - nd;
    for (int i = 0; i < nd; ++i) {
      int d = lead + i;
      in[d] = inShape[2 + i];
      out[d] = outShape[2 + i];
      kernel[d] = kernels[i];
      stride[d] = strides ? strides[i] : 1;
      pad[d] = pads ? pads[i] : 0;
      padEnd[d] = pads ? pads[nd + i] : 0;
      dilation[d] = dilations ? dilations[i] : 1;
    }
    return true;
  }

  /// The average's divisor of the window at output (o0, o1, o2): the taps
  /// inside the input, or with countIncludePad those inside the padded
  /// input (PyTorch's rule: a ceil_mode window past the end padding does
  /// not count the part beyond it).
  DS_POOL_HD int64_t divisor(const int64_t o[kMaxPoolDims]) const {
    int64_t count = 1;
    for (int d = 0; d < kMaxPoolDims; ++d) {
      int64_t start = o[d] * stride[d] - pad[d];
      int64_t stop = start + kernel[d];
      int64_t lo = countIncludePad ? -pad[d] : 0;
      int64_t hi = countIncludePad ? in[d] + padEnd[d] : in[d];
      start = start < lo ? lo : start;
      stop = stop > hi ? hi : stop;
      count *= stop > start ? stop - start : 0;
    }
    return count;
  }
};

} // namespace ds

#endif // DS_SUPPORT_POOLING_H

//===- ConvGeometry.h - a convolution's sizes and its taps ------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The geometry of an N-D convolution (1 to 3 spatial dimensions, held as
// three: the missing leading ones of size 1) as the runtime's kernels see
// it: input N x C x in, weight M x C/group x k, output N x M x out. The
// im2col row r = channel * kSize + tap of a group's column matrix reads,
// at output position o, the input element forTaps names. Shared by the CPU
// kernels, their CUDA twins and the kernel tests.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_CONVGEOMETRY_H
#define DS_SUPPORT_CONVGEOMETRY_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct ConvGeometry {
  int64_t n = 0, c = 0, m = 0, group = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  int64_t inSize = 1, outSize = 1, kSize = 1;

  int64_t cg() const { return c / group; }
  int64_t mg() const { return m / group; }
  /// Rows of a group's column matrix: its channels times the kernel taps.
  int64_t colRows() const { return cg() * kSize; }

  /// Fills the geometry from the operands' shapes and the attributes
  /// (pads: begins then ends); an error message when they disagree.
  std::string init(const std::vector<int64_t> &x, const std::vector<int64_t> &w,
                   const std::vector<int64_t> &y,
                   const std::vector<int64_t> &strides,
                   const std::vector<int64_t> &pads,
                   const std::vector<int64_t> &dilations, int64_t groups) {
    size_t rank = x.size(), sp = rank - 2;
    if (rank < 3 || rank > 5 || w.size() != rank || y.size() != rank ||
        strides.size() != sp || dilations.size() != sp || pads.size() != 2 * sp)
      return "convolution operands and attributes disagree in rank";
    n = x[0], c = x[1], m = w[0], group = groups;
    if (group < 1 || c != w[1] * group || m % group != 0 || y[0] != n ||
        y[1] != m)
      return "convolution channels or batch do not match";
    for (size_t i = 0; i < sp; ++i) {
      size_t d = 3 - sp + i;
      in[d] = x[2 + i], k[d] = w[2 + i], out[d] = y[2 + i];
      stride[d] = strides[i], dil[d] = dilations[i], pad[d] = pads[i];
      int64_t span = in[d] + pads[i] + pads[sp + i] - dil[d] * (k[d] - 1) - 1;
      if (stride[d] < 1 || dil[d] < 1 || span < 0 ||
          out[d] != span / stride[d] + 1)
        return "convolution output size does not match its input, kernel, "
               "strides, pads and dilations";
    }
    inSize = in[0] * in[1] * in[2];
    outSize = out[0] * out[1] * out[2];
    kSize = k[0] * k[1] * k[2];
    return "";
  }

  /// Whether the convolution reads its input as it is: 1x1 taps, strides
  /// 1, no padding (the column matrix is the input itself).
  bool pointwise() const {
    for (int d = 0; d < 3; ++d)
      if (k[d] != 1 || stride[d] != 1 || pad[d] != 0 || in[d] != out[d])
        return false;
    return true;
  }

  /// One tap of column row `r`: its channel and its offsets per dimension.
  struct Tap {
    int64_t ch, kd, kh, kw;
  };
  Tap tapOf(int64_t r) const {
    int64_t tap = r % kSize;
    return {r / kSize, tap / (k[2] * k[1]), (tap / k[2]) % k[1], tap % k[2]};
  }

  /// The output columns [lo, hi) at which the tap column `kw` reads inside
  /// the input row; at column ow it reads input column ow * stride + off.
  void columnRange(int64_t kw, int64_t &lo, int64_t &hi, int64_t &off) const {
    off = kw * dil[2] - pad[2];
    int64_t s = stride[2];
    // The least ow with ow * s + off >= 0, the least with > in - 1.
    lo = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t last = in[2] - 1 - off;
    hi = last < 0 ? 0 : std::min(out[2], last / s + 1);
    lo = std::min(lo, hi);
  }

  /// Calls fn(o, inRow) for every output row (od, oh) of the tap (kd, kh):
  /// o is the row's first output position, inRow the offset of the input
  /// row the tap reads within a channel, or -1 where that row is padding.
  template <typename Fn> void forRows(int64_t kd, int64_t kh, Fn fn) const {
    for (int64_t od = 0, o = 0; od < out[0]; ++od) {
      int64_t id = od * stride[0] - pad[0] + kd * dil[0];
      for (int64_t oh = 0; oh < out[1]; ++oh, o += out[2]) {
        int64_t ih = oh * stride[1] - pad[1] + kh * dil[1];
        bool inside = id >= 0 && id < in[0] && ih >= 0 && ih < in[1];
        fn(o, inside ? (id * in[1] + ih) * in[2] : int64_t(-1));
      }
    }
  }

  /// Calls fn(o, i) for every output position o of column row `r`: i is
  /// the input element (channel * inSize + pixel, within the group) that
  /// the row's tap reads there, or -1 in the padding.
  template <typename Fn> void forTaps(int64_t r, Fn fn) const {
    int64_t ch = r / kSize, tap = r % kSize;
    int64_t kw = tap % k[2], kh = (tap / k[2]) % k[1], kd = tap / (k[2] * k[1]);
    const int64_t base = ch * inSize;
    for (int64_t od = 0, o = 0; od < out[0]; ++od) {
      int64_t id = od * stride[0] - pad[0] + kd * dil[0];
      for (int64_t oh = 0; oh < out[1]; ++oh) {
        int64_t ih = oh * stride[1] - pad[1] + kh * dil[1];
        bool row = id >= 0 && id < in[0] && ih >= 0 && ih < in[1];
        for (int64_t ow = 0; ow < out[2]; ++ow, ++o) {
          int64_t iw = ow * stride[2] - pad[2] + kw * dil[2];
          fn(o, row && iw >= 0 && iw < in[2]
                    ? base + (id * in[1] + ih) * in[2] + iw
                    : -1);
        }
      }
    }
  }
};

} // namespace ds

#endif // DS_SUPPORT_CONVGEOMETRY_H

//===- Resize.h - the sampling of ds.resize and its gradient ----*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM; also compiled by nvcc).
//
// ds.resize samples the spatial dimensions (1 to 3) of an (N, C,
// spatial...) tensor as ONNX's Resize does in its nearest and linear
// modes: each output coordinate maps back to an input coordinate by the
// coordinate transformation mode and that dimension's scale; nearest takes
// one input element (rounded by the nearest mode), linear blends the two
// neighbours (indices clamped to the input, as ONNX's edge padding and
// PyTorch's clamping both give). The result is separable: one tap table
// per dimension, and an output element the product of the dimensions'
// taps. ds.resize_grad is the adjoint: each output gradient scattered,
// with the same weights, onto the same input elements. The verifier, the
// importer, the CPU and the CUDA kernels share these tables.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_RESIZE_H
#define DS_SUPPORT_RESIZE_H

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DS_RESIZE_HD __host__ __device__
#else
#define DS_RESIZE_HD
#endif

namespace ds {

/// The spatial dimensions ds.resize samples.
constexpr int kMaxResizeDims = 3;

enum class ResizeMode : int { Nearest, Linear };
enum class ResizeCoord : int {
  HalfPixel,        // (x + 0.5) / scale - 0.5
  PytorchHalfPixel, // as half_pixel; 0 when the output has one element
  AlignCorners,     // x * (in - 1) / (in * scale - 1); 0 if that is 1
  Asymmetric,       // x / scale
  TfHalfPixelForNn, // (x + 0.5) / scale
};
enum class ResizeNearest : int {
  RoundPreferFloor,
  RoundPreferCeil,
  Floor,
  Ceil
};

/// The names, as the attributes (and ONNX) spell them.
inline constexpr const char *kResizeModeNames[] = {"nearest", "linear"};
inline constexpr const char *kResizeCoordNames[] = {
    "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn"};
inline constexpr const char *kResizeNearestNames[] = {
    "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

/// The index of `name` in `names` (as enum `E`); false when absent.
template <typename E, int N>
bool resizeEnumFromName(const char *const (&names)[N], const char *name,
                        E &out) {
  for (int i = 0; i < N; ++i)
    if (std::strcmp(name, names[i]) == 0) {
      out = static_cast<E>(i);
      return true;
    }
  return false;
}

/// The sampling rule of one ds.resize.
struct ResizeRule {
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoord coord = ResizeCoord::HalfPixel;
  ResizeNearest nearest = ResizeNearest::RoundPreferFloor;

  /// Fills the rule from the attribute names; false on an unknown one.
  bool set(const char *modeName, const char *coordName,
           const char *nearestName) {
    return resizeEnumFromName(kResizeModeNames, modeName, mode) &&
           resizeEnumFromName(kResizeCoordNames, coordName, coord) &&
           resizeEnumFromName(kResizeNearestNames, nearestName, nearest);
  }
};

/// The output size ONNX gives a dimension of `in` elements resized by
/// `scale` (floor(in * scale)).
inline int64_t resizedSize(int64_t in, double scale) {
  return static_cast<int64_t>(std::floor(static_cast<double>(in) * scale));
}

/// Up to two input elements and their weights (nearest: w1 is 0).
struct ResizeTap {
  int64_t i0 = 0, i1 = 0;
  float w0 = 1.0f, w1 = 0.0f;
};

/// The input coordinate of output index `o` along a dimension of `in`
/// input and `out` output elements resized by `scale`.
DS_RESIZE_HD inline double resizeSource(ResizeCoord c, int64_t o, int64_t in,
                                        int64_t out, double scale) {
  double x = static_cast<double>(o);
  switch (c) {
  case ResizeCoord::HalfPixel:
    return (x + 0.5) / scale - 0.5;
  case ResizeCoord::PytorchHalfPixel:
    return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  case ResizeCoord::AlignCorners: {
    // ONNX divides by the resized length before flooring (in * scale):
    // the output size when sizes were given (scale = out / in), and what
    // torch uses whenever in * scale is whole.
    double len = static_cast<double>(in) * scale;
    if (std::fabs(len - static_cast<double>(out)) <
        1e-9 * static_cast<double>(out))
      len = static_cast<double>(out);
    return len > 1.0 ? x * static_cast<double>(in - 1) / (len - 1.0) : 0.0;
  }
  case ResizeCoord::Asymmetric:
    return x / scale;
  case ResizeCoord::TfHalfPixelForNn:
    return (x + 0.5) / scale;
  }
  return 0.0;
}

DS_RESIZE_HD inline int64_t resizeClamp(int64_t i, int64_t in) {
  return i < 0 ? 0 : (i >= in ? in - 1 : i);
}

/// The taps of output index `o` (see resizeSource for the arguments).
DS_RESIZE_HD inline ResizeTap resizeTap(const ResizeRule &r, int64_t o,
                                        int64_t in, int64_t out, double scale) {
  double x = resizeSource(r.coord, o, in, out, scale);
  ResizeTap t;
  double lo = std::floor(x);
  if (r.mode == ResizeMode::Linear) {
    double frac = x - lo;
    t.i0 = resizeClamp(static_cast<int64_t>(lo), in);
    t.i1 = resizeClamp(static_cast<int64_t>(lo) + 1, in);
    t.w1 = static_cast<float>(frac);
    t.w0 = 1.0f - t.w1;
    return t;
  }
  double frac = x - lo, pick = lo;
  switch (r.nearest) {
  case ResizeNearest::RoundPreferFloor:
    pick = frac > 0.5 ? lo + 1 : lo;
    break;
  case ResizeNearest::RoundPreferCeil:
    pick = frac >= 0.5 ? lo + 1 : lo;
    break;
  case ResizeNearest::Floor:
    pick = lo;
    break;
  case ResizeNearest::Ceil:
    pick = std::ceil(x);
    break;
  }
  t.i0 = t.i1 = resizeClamp(static_cast<int64_t>(pick), in);
  return t;
}

/// One resize's geometry over three spatial dimensions (outermost first;
/// fewer dimensions lead with size-1 ones of scale 1).
struct ResizeGeometry {
  int64_t planes = 0; // N * C
  int64_t in[kMaxResizeDims] = {1, 1, 1}, out[kMaxResizeDims] = {1, 1, 1};
  double scale[kMaxResizeDims] = {1.0, 1.0, 1.0};
  ResizeRule rule;

  DS_RESIZE_HD int64_t inPlane() const { return in[0] * in[1] * in[2]; }
  DS_RESIZE_HD int64_t outPlane() const { return out[0] * out[1] * out[2]; }

  /// Fills the geometry of a rank-(2 + nd) input and output; false on a
  /// rank it cannot resize or N, C not kept.
  bool set(const int64_t *inShape, const int64_t *outShape, int nd,
           const double *scales) {
    if (nd < 1 || nd > kMaxResizeDims || inShape[0] != outShape[0] ||
        inShape[1] != outShape[1])
      return false;
    planes = inShape[0] * inShape[1];
    int lead = kMaxResizeDims - nd;
    for (int i = 0; i < nd; ++i) {
      in[lead + i] = inShape[2 + i];
      out[lead + i] = outShape[2 + i];
      scale[lead + i] = scales[i];
    }
    return true;
  }

  /// The taps of output index `o` along dimension `d`. A size-1 leading
  /// dimension maps to 0 with weight 1 whatever the rule.
  DS_RESIZE_HD ResizeTap tap(int d, int64_t o) const {
    if (in[d] == 1 && out[d] == 1)
      return ResizeTap();
    return resizeTap(rule, o, in[d], out[d], scale[d]);
  }
};

} // namespace ds

#endif // DS_SUPPORT_RESIZE_H

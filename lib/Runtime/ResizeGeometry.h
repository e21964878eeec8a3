//===- ResizeGeometry.h - a resize instruction's geometry -------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM; also compiled by nvcc).
//
// The CPU (Cpu/Resize.cpp) and CUDA (Cuda/Resize.cu) resize kernels read
// their instruction the same way: Support/Resize.h's geometry from the
// resize's input and output shapes (for the gradient: its result and its
// incoming gradient), the `scales` float list and the three names.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_RESIZEGEOMETRY_H
#define DS_RUNTIME_RESIZEGEOMETRY_H

#include "Kernel.h"
#include "ds/Support/Resize.h"

namespace ds::rt {

/// Fills `g`; fails the kernel naming what does not match.
inline bool resizeGeometryOf(KernelContext &ctx, const TensorView &in,
                             const TensorView &out, ResizeGeometry &g) {
  std::vector<double> scales = ctx.attrs.getFloats("scales");
  int nd = static_cast<int>(in.rank()) - 2;
  if (out.rank() != in.rank() || static_cast<int>(scales.size()) != nd ||
      !g.set(in.shape.data(), out.shape.data(), nd, scales.data()))
    return ctx.fail("resize: scales and shapes do not match (rank " +
                    std::to_string(in.rank()) + ", " +
                    std::to_string(scales.size()) + " scales)");
  std::string mode = ctx.attrs.getString("mode");
  std::string coord = ctx.attrs.getString("coordinate_transformation_mode");
  std::string nearest = ctx.attrs.getString("nearest_mode");
  if (!g.rule.set(mode.c_str(), coord.c_str(), nearest.c_str()))
    return ctx.fail("resize: unknown mode '" + mode + "', '" + coord +
                    "' or '" + nearest + "'");
  return true;
}

} // namespace ds::rt

#endif // DS_RUNTIME_RESIZEGEOMETRY_H

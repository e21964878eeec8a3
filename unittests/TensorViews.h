//===- TensorViews.h - kernel operands over test buffers ------*- C++ -*-===//
//
// Part of the ds project.
//
// The kernel unit tests' one way to make a TensorView over a buffer they
// own (f32 unless a type is given).
//
//===----------------------------------------------------------------------===//

#ifndef DS_UNITTESTS_TENSORVIEWS_H
#define DS_UNITTESTS_TENSORVIEWS_H

#include "Kernel.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace ds::rt::test {

inline TensorView view(void *data, DType type, std::vector<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = type;
  v.shape = std::move(shape);
  return v;
}

inline TensorView view(void *data, std::vector<int64_t> shape) {
  return view(data, DType::F32, std::move(shape));
}

inline TensorView view(std::vector<float> &values,
                       std::vector<int64_t> shape) {
  return view(values.data(), DType::F32, std::move(shape));
}

} // namespace ds::rt::test

#endif // DS_UNITTESTS_TENSORVIEWS_H

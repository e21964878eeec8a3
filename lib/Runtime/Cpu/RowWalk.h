//===- RowWalk.h - an elementwise output walked as rows --------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//
//
// The row walk the CPU elementwise kernels share (Elementwise.cpp and the
// fused kernel, Fused.cpp): the output's coalesced innermost dimension as
// rows, each operand with its strides (0 where it broadcasts).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_ROWWALK_H
#define DS_RUNTIME_CPU_ROWWALK_H

#include "Kernels.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ds::rt {

/// Row decomposition of an output shape with per-operand strides.
struct RowWalk {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides; // per operand, output rank
  int64_t inner = 1, rows = 0;

  RowWalk(const std::vector<int64_t> &out,
          const std::vector<const std::vector<int64_t> *> &operands)
      : shape(out) {
    for (const auto *s : operands)
      strides.push_back(broadcastStrides(*s, out.size()));
    coalesce();
    int64_t n = 1;
    for (int64_t d : out)
      n *= d;
    inner = shape.empty() ? 1 : shape.back();
    rows = inner == 0 ? 0 : n / inner;
  }
  /// Merges adjacent dimensions that every operand walks alike (both
  /// contiguously, or both broadcast), and drops size-1 ones, so that rows
  /// are as long as they can be: [N,C,H,W] x [1,C,1,1] walks rows of H*W,
  /// not W. Each element is computed as before; only the walk changes.
  void coalesce() {
    std::vector<int64_t> s;
    std::vector<std::vector<int64_t>> st(strides.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1)
        continue;
      bool merge = !s.empty();
      for (size_t k = 0; k < strides.size() && merge; ++k)
        merge = st[k].back() == strides[k][d] * shape[d];
      if (merge) {
        s.back() *= shape[d];
        for (size_t k = 0; k < strides.size(); ++k)
          st[k].back() = strides[k][d];
        continue;
      }
      s.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k)
        st[k].push_back(strides[k][d]);
    }
    if (s.empty() && !shape.empty()) { // all dimensions of size 1
      s.push_back(1);
      for (size_t k = 0; k < strides.size(); ++k)
        st[k].push_back(0);
    }
    shape = std::move(s);
    strides = std::move(st);
  }
  /// Offset of operand k at the start of row r.
  int64_t offset(size_t k, int64_t r) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      int64_t idx = r % shape[d];
      r /= shape[d];
      off += idx * strides[k][d];
    }
    return off;
  }
  int64_t innerStride(size_t k) const {
    return shape.empty() ? 0 : strides[k].back();
  }
  int64_t grain() const { return std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)); }
};

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_ROWWALK_H

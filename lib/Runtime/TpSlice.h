//===- TpSlice.h - tensor-parallel slices of a tensor ---------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A tensor split for tensor parallelism along `axis` over `parts` ranks,
// in `blocks` blocks: the axis is [blocks][parts][c] and rank r holds
// [b][r][:] of every block b (a fused Q/K/V weight is 3 blocks, each split
// by heads; a plain split is 1 block). Tensors are row-major bytes.
// A plain split whose axis the parts do not divide is padded: each rank
// holds ceil(n / parts) entries, zero past the whole tensor's end.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_TPSLICE_H
#define DS_RUNTIME_TPSLICE_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ds::rt {

struct TpLayout {
  int64_t outer = 1, blocks = 1, parts = 1, chunk = 0, inner = 1, total = 0;
  /// `whole` is the whole tensor's shape.
  TpLayout(const std::vector<int64_t> &whole, int axis, int64_t parts_,
           int64_t blocks_)
      : blocks(blocks_), parts(parts_) {
    for (int d = 0; d < axis; ++d)
      outer *= whole[d];
    for (size_t d = axis + 1; d < whole.size(); ++d)
      inner *= whole[d];
    total = whole[axis];
    chunk = blocks > 1 ? whole[axis] / (blocks * parts)
                       : (whole[axis] + parts - 1) / parts;
  }
  bool padded() const { return blocks == 1 && chunk * parts != total; }
  /// Bytes of one rank's slice.
  size_t sliceBytes(size_t elem) const {
    return static_cast<size_t>(outer * blocks) * run(elem);
  }
  /// Bytes of one [c][inner] run.
  size_t run(size_t elem) const {
    return static_cast<size_t>(chunk * inner) * elem;
  }
  /// Copies rank r's slice out of the whole tensor.
  void cut(const unsigned char *whole, unsigned char *slice, int64_t r,
           size_t elem) const {
    size_t n = run(elem);
    if (padded()) {
      size_t row = static_cast<size_t>(inner) * elem;
      int64_t valid = std::max<int64_t>(0, std::min(chunk, total - r * chunk));
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(slice + o * n, whole + (o * total + r * chunk) * row,
                    valid * row);
        std::memset(slice + o * n + valid * row, 0, n - valid * row);
      }
      return;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t b = 0; b < blocks; ++b)
        std::memcpy(slice + (o * blocks + b) * n,
                    whole + ((o * blocks + b) * parts + r) * n, n);
  }
  /// Puts rank r's slice into the whole tensor.
  void join(const unsigned char *slice, unsigned char *whole, int64_t r,
            size_t elem) const {
    size_t n = run(elem);
    if (padded()) {
      size_t row = static_cast<size_t>(inner) * elem;
      int64_t valid = std::max<int64_t>(0, std::min(chunk, total - r * chunk));
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(whole + (o * total + r * chunk) * row, slice + o * n,
                    valid * row);
      return;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t b = 0; b < blocks; ++b)
        std::memcpy(whole + ((o * blocks + b) * parts + r) * n,
                    slice + (o * blocks + b) * n, n);
  }
};

} // namespace ds::rt

#endif // DS_RUNTIME_TPSLICE_H

//===- EmbeddingBag.h - ds.embedding_bag's geometry, for its kernels -*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The shapes ds.embedding_bag and its gradient read: a [V, D] table, N
// indices, B + 1 bag bounds, [B, D] bags, N per-sample weights (sum). The
// CPU kernels (Cpu/EmbeddingBag.cpp) and their CUDA twins
// (Cuda/EmbeddingBag.cu) check their operands with it.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_EMBEDDINGBAG_H
#define DS_SUPPORT_EMBEDDINGBAG_H

#include <cstdint>
#include <string>

namespace ds {

enum class BagMode { Sum, Mean, Max };

struct BagGeometry {
  int64_t rows = 0, dim = 0; // the table: V x D
  int64_t count = 0;         // N indices
  int64_t bags = 0;          // B

  /// From the table's, the bags', the indices' and the bounds' shapes
  /// (ranks and dims); false when they do not fit together.
  bool set(const int64_t *table, int64_t tableRank, const int64_t *bagShape,
           int64_t bagRank, const int64_t *indices, int64_t indicesRank,
           const int64_t *bounds, int64_t boundsRank) {
    if (tableRank != 2 || bagRank != 2 || indicesRank != 1 || boundsRank != 1 ||
        bounds[0] < 1 || bagShape[0] != bounds[0] - 1 ||
        bagShape[1] != table[1])
      return false;
    rows = table[0];
    dim = table[1];
    count = indices[0];
    bags = bagShape[0];
    return true;
  }
};

/// The mode attribute's value; false for an unknown one.
inline bool parseBagMode(const std::string &s, BagMode &mode) {
  if (s == "sum")
    mode = BagMode::Sum;
  else if (s == "mean")
    mode = BagMode::Mean;
  else if (s == "max")
    mode = BagMode::Max;
  else
    return false;
  return true;
}

} // namespace ds

#endif // DS_SUPPORT_EMBEDDINGBAG_H

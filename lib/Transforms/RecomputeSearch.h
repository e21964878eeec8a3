//===- RecomputeSearch.h - what to keep and what to recompute ---*- C++ -*-===//
//
// Part of the ds project.
//
// The recompute pass cuts the forward pass into segments and measures
// each; this is the choice of which to recompute, on those measurements
// alone: the chain model of the activation peak, the layers (segments
// repeating with a period) of `every-layer`, and the cheapest choice that
// fits a budget. docs/design.md section 8 has the model.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_RECOMPUTESEARCH_H
#define DS_TRANSFORMS_RECOMPUTESEARCH_H

#include "mlir/IR/Operation.h"

#include "llvm/ADT/Hashing.h"

#include <optional>
#include <utility>
#include <vector>

namespace mlir::ds::recompute {

/// A piece of the forward pass between two cut points.
struct Segment {
  SmallVector<Operation *> ops; // forward data ops, in order
  Value input, output;          // kept cut values entering and leaving
  SmallVector<Value> saved;     // values the backward pass reads
  int64_t savedBytes = 0, inputBytes = 0, flops = 0;
  bool recomputable = false;
  llvm::hash_code signature = 0; // the op sequence, to find layers
};

/// A plan's modelled activation bytes: kept saved values, kept cut values,
/// and the largest recomputed unit while its backward runs.
struct Choice {
  std::vector<bool> recompute; // per segment
  int64_t activations = 0, flops = 0;
};

/// The chain model's activation peak (without the always-kept bytes): at
/// the end of the forward pass every kept segment's saved values are live;
/// during segment j's backward pass the kept values of the segments before
/// it and segment j's own (kept or recomputed) are.
int64_t chainPeak(ArrayRef<int64_t> saved, const std::vector<bool> &rc);

/// The cost of recomputing a set of segments one by one, with `fixed`
/// bytes kept whatever the choice (cut values, pinned outputs).
class ChainModel {
public:
  ChainModel(ArrayRef<Segment> segs, int64_t fixed);

  /// The plan recomputing the segments `rc` marks.
  Choice evaluate(const std::vector<bool> &rc) const;
  /// Nothing recomputed.
  Choice none() const;
  /// Every recomputable segment recomputed: the lowest peak.
  Choice full() const;

  ArrayRef<Segment> segments() const { return segs; }
  int64_t fixedBytes() const { return fixed; }

private:
  ArrayRef<Segment> segs;
  int64_t fixed;
  std::vector<int64_t> saved, flops;
};

/// The layers: the longest run of segments repeating with period p (1-4),
/// as units [first, last] of `period` segments each that can be recomputed
/// whole.
struct Layers {
  size_t period = 0;
  std::vector<std::pair<size_t, size_t>> units;
};
Layers findLayers(ArrayRef<Segment> segs);

/// Every layer: a unit is recomputed whole, its inner cut values with it
/// (only the unit's input stays).
Choice planEveryLayer(ArrayRef<Segment> segs, const Layers &layers,
                      int64_t fixed);

/// The cheapest set of recomputed segments (least FLOPs; then least
/// activations) whose modelled activations fit `budget`, if any.
std::optional<Choice> solveBudget(const ChainModel &model, int64_t budget);

} // namespace mlir::ds::recompute

#endif // DS_TRANSFORMS_RECOMPUTESEARCH_H

//===- ArenaAssign.h - offsets for blocks with known lifetimes --*- C++ -*-===//
//
// Part of the ds project.
//
// The memory plan's offset assignment, apart from the IR: blocks of bytes,
// each live over an inclusive range of steps, get offsets in one arena so
// that no two blocks live at the same step share a byte. Several orders are
// tried (program order first-fit, greedy by size and by lifetime with best
// fit, as the heap simulators of XLA and TFLite do) and the smallest arena
// wins. docs/design.md section 10 has the model.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_ARENAASSIGN_H
#define DS_TRANSFORMS_ARENAASSIGN_H

#include <cstdint>
#include <vector>

namespace mlir::ds::arena {

/// One block: live from step `first` to step `last` (both included), of
/// `bytes` (already aligned). `order`: its place in program order among
/// blocks first written at the same step (the first-fit strategy's order).
struct Block {
  int64_t first = 0, last = 0, bytes = 0, order = 0;
};

/// Offsets per block (in the input's order) and the arena's size: the
/// largest offset + bytes. `strategy` names the order that won.
struct Assignment {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  const char *strategy = "";
};

/// The most bytes live at one step: no assignment can do better.
int64_t livePeak(const std::vector<Block> &blocks);

/// The smallest of the strategies' arenas (ties: the first strategy,
/// program-order first-fit, so that small plans keep their old offsets).
Assignment assign(const std::vector<Block> &blocks);

} // namespace mlir::ds::arena

#endif // DS_TRANSFORMS_ARENAASSIGN_H

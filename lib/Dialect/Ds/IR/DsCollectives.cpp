//===- DsCollectives.cpp - CollectiveOpInterface of the ds collectives ----===//
//
// Part of the ds project.
//
// What each collective does, among which ranks, and how many bytes one
// rank puts on the wire. The integer `group` attribute of the collectives
// maps to CommGroup as the runtime reads it: -1 every rank, 1 the
// tensor-parallel ranks, anything else the data-parallel ranks.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"

using namespace mlir;
using namespace mlir::ds;

StringRef ds::stringifyCollectiveKind(CollectiveKind kind) {
  static constexpr StringLiteral names[] = {"all_reduce", "reduce_scatter",
                                            "all_gather", "send", "recv"};
  return names[static_cast<unsigned>(kind)];
}

StringRef ds::stringifyCommGroup(CommGroup group) {
  static constexpr StringLiteral names[] = {"world", "data", "tensor",
                                            "pipeline"};
  return names[static_cast<unsigned>(group)];
}

CommGroup ds::commGroupFromAttr(int64_t group) {
  if (group == -1)
    return CommGroup::World;
  return group == 1 ? CommGroup::Tensor : CommGroup::Data;
}

CollectiveKind AllReduceOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}
CollectiveKind AllGatherOp::getCollectiveKind() {
  return CollectiveKind::AllGather;
}
CollectiveKind ReduceScatterOp::getCollectiveKind() {
  return CollectiveKind::ReduceScatter;
}
CollectiveKind TpAllReduceOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}
CollectiveKind SpAllGatherOp::getCollectiveKind() {
  return CollectiveKind::AllGather;
}
CollectiveKind SpReduceScatterOp::getCollectiveKind() {
  return CollectiveKind::ReduceScatter;
}

// The overflow flag, reduced (a maximum) over the ranks.
CollectiveKind CheckOverflowOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}
int64_t CheckOverflowOp::getBytesPerRank() {
  return detail::tensorBytes(getType());
}

// Each row's maximum (an all-gather of N floats), then its sum of
// exponentials and target score (an all-reduce of 2N floats), in f32.
CollectiveKind VocabCrossEntropyOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}
int64_t VocabCrossEntropyOp::getBytesPerRank() {
  return 3 * detail::numElements(getLabels().getType()) *
         static_cast<int64_t>(sizeof(float));
}

CollectiveKind PipeSendOp::getCollectiveKind() { return CollectiveKind::Send; }
CommGroup PipeSendOp::getCommGroup() { return CommGroup::Pipeline; }

CollectiveKind PipeRecvOp::getCollectiveKind() { return CollectiveKind::Recv; }
CommGroup PipeRecvOp::getCommGroup() { return CommGroup::Pipeline; }
int64_t PipeRecvOp::getBytesPerRank() { return detail::tensorBytes(getType()); }

// The stages that hold a tied parameter sum their gradients: this stage's
// total goes to each peer (on a step's last micro-batch).
CollectiveKind TiedGradSumOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}
CommGroup TiedGradSumOp::getCommGroup() { return CommGroup::Pipeline; }
int64_t TiedGradSumOp::getBytesPerRank() {
  return detail::tensorBytes(getGrad().getType()) *
         static_cast<int64_t>(getPeers().size());
}

//===- PlanSearchOffload.cpp - the offload placements a layout tries ------===//
//
// Part of the ds project.
//
// The order in which a compiled candidate of --plan=auto tries offload
// after the recompute modes (docs/planner.md, "Offload" and "Activation
// offload").
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

using namespace mlir::ds;
using namespace mlir::ds::plan_search;

std::array<int, 3> plan_search::givenOffload(const TrainingOptions &o) {
  auto given = [&](llvm::StringRef flag, const std::string &value) {
    return !o.isGiven(flag)                    ? -1
           : value == "none"                   ? 0
           : value == "cpu" || value == "host" ? 1
                                               : 2;
  };
  return {given("offload-optimizer", o.offloadOptimizer),
          given("offload-param", o.offloadParam),
          given("offload-activations", o.offloadActivations)};
}

void plan_search::placeOffload(Candidate &c, std::array<int, 3> at) {
  c.offload = at[0] > 0, c.nvme = at[0] == 2;
  c.offloadParam = at[1] > 0, c.paramNvme = at[1] == 2;
  c.offloadActivations = at[2] > 0;
}

std::vector<std::array<int, 3>>
plan_search::offloadLadder(const Candidate &cand,
                           const ::ds::ClusterSpec &cluster,
                           std::array<int, 3> given, bool activations) {
  auto [givenOpt, givenParam, givenAct] = given;
  // (optimizer, parameters): 1 the host, 2 NVMe (through host memory).
  // (The compiler refuses offload with pipeline parallelism.)
  // The compressed optimizers (1-bit Adam and LAMB, 0/1 Adam) keep their
  // state on the device: the compiler refuses optimizer and parameter
  // offload with them, so no compile is spent on those placements.
  bool compressed = cand.compression == "1bit" || cand.compression == "0/1";
  std::vector<std::pair<int, int>> pairs;
  if (cluster.host.present && cand.pp == 1) {
    pairs = {{0, 0}};
    if (!compressed)
      pairs.insert(pairs.end(), {{1, 0}, {1, 1}});
    if (cluster.nvme.present && !compressed)
      pairs.insert(pairs.end(), {{2, 0}, {2, 1}, {2, 2}});
  }
  std::vector<std::array<int, 3>> ladder;
  if (!activations) {
    for (auto [opt, param] : pairs)
      ladder.push_back({opt, param, std::max(givenAct, 0)});
  } else if (!pairs.empty()) {
    // The activations on the host: with the placement the first pass
    // started from, then with the most offloaded one the layout allows
    // (two compiles, not one per placement, to keep within
    // --plan-compiles).
    ladder.push_back({std::max(givenOpt, 0), std::max(givenParam, 0), 1});
    for (auto it = pairs.rbegin(); it != pairs.rend(); ++it)
      if ((it->second == 0 || cand.zero == 3) &&
          (givenOpt < 0 || it->first == givenOpt) &&
          (givenParam < 0 || it->second == givenParam)) {
        if (ladder.back() != std::array<int, 3>{it->first, it->second, 1})
          ladder.push_back({it->first, it->second, 1});
        break;
      }
  }
  // Given values hold; the starting placement was compiled already.
  llvm::erase_if(ladder, [&](const std::array<int, 3> &r) {
    bool start = true;
    for (int k = 0; k < 3; ++k) {
      if (given[k] >= 0 && r[k] != given[k])
        return true;
      start &= r[k] == std::max(given[k], 0);
    }
    return start || (r[1] > 0 && cand.zero != 3);
  });
  return ladder;
}

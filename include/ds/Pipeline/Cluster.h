//===- Cluster.h - --cluster: a preset or a cluster file --------*- C++ -*-===//
//
// Part of the ds project.
//
// Reads the cluster description (docs/planner.md) that `ds-opt --cluster`
// names: a preset `NAME[:NODESxDEVICES]` or a JSON file, validated field
// by field. The result is the simulator's ::ds::ClusterSpec.
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_CLUSTER_H
#define DS_PIPELINE_CLUSTER_H

#include "ds/Support/Cluster.h"

#include "llvm/Support/Error.h"

namespace mlir::ds {

/// --cluster's cluster and how it was named (for errors).
struct ClusterDescription {
  ::ds::ClusterSpec spec;
  std::string source;
};

/// The cluster of a JSON text; errors read "SOURCE: FIELD.PATH: problem".
llvm::Expected<::ds::ClusterSpec> parseClusterJson(llvm::StringRef text,
                                                   llvm::StringRef source);

/// --cluster's value: a file when one of that name exists (or the value
/// ends in .json), else a preset `NAME[:NODESxDEVICES]`.
llvm::Expected<::ds::ClusterSpec> loadCluster(llvm::StringRef value);

} // namespace mlir::ds

#endif // DS_PIPELINE_CLUSTER_H

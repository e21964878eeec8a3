//===- ExportChecks.cpp - What the importer says about an export ----------===//
//
// Part of the ds project.
//
// Checks of the whole ModelProto, made before anything is built, so that
// the user first hears what to change about the export rather than about
// one node. In this order:
//
//  1. An eval-mode export is an error that says how to export for
//     training: a ds.export record whose ds.mode is not "training", or a
//     BatchNormalization node without training_mode=1 (it would normalize
//     with the running statistics and never update them).
//     ImportOptions::allowEvalExport (--allow-eval-export) lets it through.
//  2. Every op type without a handler, in one error: the op types in order
//     of first appearance, each with its node count and first node.
//  3. A constant-folded export (no ds.export record, initializers named
//     onnx::*) gets one warning: folding renamed and merged parameters.
//
// Eval mode comes first because re-exporting for training changes the
// graph (BatchNormalization gets its training outputs; torch no longer
// fuses BatchNormalization into the Conv before it), so the list of
// unsupported op types is only worth reading for the training export.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

/// What a message says to do instead of the export it found.
static constexpr llvm::StringLiteral kExportForTraining =
    "export for training with ds.export, or torch.onnx.export(..., "
    "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)";

LogicalResult Importer::checkExport() {
  if (!handlerTable().duplicateOps().empty())
    return error()
           << "internal error: two import handlers for ONNX op type '"
           << handlerTable().duplicateOps().front() << "'";
  if (failed(checkTrainingMode()) || failed(checkSupportedOps()))
    return failure();
  warnConstantFolded();
  return success();
}

//===----------------------------------------------------------------------===//
// Eval-mode exports
//===----------------------------------------------------------------------===//

static bool isEvalBatchNorm(const onnx::NodeProto &node) {
  if (!HandlerTable::isDefaultDomain(node.domain()) ||
      node.op_type() != "BatchNormalization")
    return false;
  for (const auto &a : node.attribute())
    if (a.name() == "training_mode")
      return a.i() != 1;
  return true;
}

LogicalResult Importer::checkTrainingMode() {
  if (options.allowEvalExport)
    return success();
  constexpr llvm::StringLiteral override =
      "; --allow-eval-export imports it as it is";
  for (const auto &prop : model.metadata_props())
    if (prop.key() == "ds.mode" && prop.value() != "training")
      return error() << "the model was exported in " << prop.value()
                     << " mode (ds.mode of its ds.export record): "
                     << kExportForTraining << override;
  const onnx::GraphProto &g = model.graph();
  auto isEval = [](const onnx::NodeProto &n) { return isEvalBatchNorm(n); };
  auto first = llvm::find_if(g.node(), isEval);
  if (first == g.node().end())
    return success();
  auto count = llvm::count_if(g.node(), isEval);
  return error() << count << " BatchNormalization node"
                 << (count == 1 ? " was" : "s were")
                 << " exported in eval mode (no training_mode=1; first '"
                 << nodeName(*first, first - g.node().begin())
                 << "'): BatchNormalization would then normalize with the "
                    "running statistics and never update them; "
                 << kExportForTraining << override;
}

//===----------------------------------------------------------------------===//
// Unsupported op types
//===----------------------------------------------------------------------===//

namespace {
/// An op type without a handler: how many nodes have it, and the first.
struct UnsupportedOp {
  std::string name; // OpType, or domain.OpType outside the default domain
  const onnx::NodeProto *first;
  size_t firstIndex;
  size_t count = 0;
};
} // namespace

LogicalResult Importer::checkSupportedOps() {
  SmallVector<UnsupportedOp> ops;
  llvm::StringMap<size_t> byName;
  auto scan = [&](const onnx::GraphProto &graph, size_t base) {
    for (auto [i, node] : llvm::enumerate(graph.node())) {
      if (handlerTable().lookup(node.domain(), node.op_type()))
        continue;
      std::string name = HandlerTable::isDefaultDomain(node.domain())
                             ? node.op_type()
                             : node.domain() + "." + node.op_type();
      auto [it, added] = byName.try_emplace(name, ops.size());
      if (added)
        ops.push_back({name, &node, base + i});
      ++ops[it->second].count;
    }
  };
  scan(model.graph(), 0);
  // The training algorithm is built after the graph, its nodes numbered on.
  if (options.runTrainingInfo && model.training_info_size() > 0)
    scan(model.training_info(0).algorithm(), model.graph().node_size());
  if (ops.empty())
    return success();

  if (ops.size() == 1) {
    // One op type: the error is located at its first node.
    const UnsupportedOp &op = ops.front();
    const onnx::NodeProto &node = *op.first;
    InFlightDiagnostic diag = mlir::emitError(nodeLoc(node, op.firstIndex));
    diag << "node '" << nodeName(node, op.firstIndex) << "' ("
         << node.op_type() << "): ";
    if (HandlerTable::isDefaultDomain(node.domain()))
      diag << "unsupported op type '" << node.op_type() << "' (opset "
           << opset << ")";
    else
      diag << "unsupported op '" << node.op_type() << "' of domain '"
           << node.domain() << "'";
    if (op.count > 1)
      diag << "; " << op.count << " nodes have it";
    return diag;
  }
  std::string list;
  for (const UnsupportedOp &op : ops)
    list += (list.empty() ? "" : ", ") + op.name + " (" +
            std::to_string(op.count) + (op.count == 1 ? " node" : " nodes") +
            ", first " + nodeName(*op.first, op.firstIndex) + ")";
  return error() << ops.size() << " unsupported op types (opset " << opset
                 << "): " << list;
}

//===----------------------------------------------------------------------===//
// Constant-folded exports
//===----------------------------------------------------------------------===//

void Importer::warnConstantFolded() {
  bool hasRecord =
      llvm::any_of(model.metadata_props(), [](const auto &prop) {
        return llvm::StringRef(prop.key()).starts_with("ds.");
      });
  if (hasRecord)
    return;
  auto renamed =
      llvm::count_if(model.graph().initializer(), [](const auto &init) {
        return llvm::StringRef(init.name()).starts_with("onnx::");
      });
  if (renamed == 0)
    return;
  mlir::emitWarning(fileLoc)
      << renamed << " initializer" << (renamed == 1 ? "" : "s")
      << " named onnx::* (a constant-folded export renames and merges "
         "parameters: their checkpoint names are lost, and a folded one, "
         "such as a transposed weight or a Conv fused with its "
         "BatchNormalization, is no longer the module's parameter); "
      << kExportForTraining;
}

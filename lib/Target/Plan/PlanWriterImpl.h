//===- PlanWriterImpl.h - the plan writer's parts (internal) ----*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TARGET_PLAN_PLANWRITERIMPL_H
#define DS_TARGET_PLAN_PLANWRITERIMPL_H

#include "ds/Target/Plan/PlanWriter.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "ds/Support/PlanTimeline.h"

#include "plan.pb.h"

namespace mlir::ds::plan_writer {

/// A pipeline's stage modules (ds.stage), in order; empty for a flat plan.
SmallVector<ModuleOp> stageModules(ModuleOp module);

/// One program's plan: @forward of `module`, lowered and memory-planned,
/// for `worldSize` ranks.
LogicalResult buildPlan(ModuleOp module, const PlanWriteOptions &options,
                        int64_t worldSize, ::ds::plan::Plan &p);

/// The weights source (the ONNX file relative to the plan, and its hash)
/// and the compile options.
LogicalResult addSource(ModuleOp module, StringRef planPath,
                        const PlanWriteOptions &options, ::ds::plan::Plan &p);

/// The container of a pipeline's stage plans (`stages`: the stage
/// modules), and its report.
LogicalResult writePipelinePlan(ModuleOp module, ArrayRef<ModuleOp> stages,
                                StringRef planPath,
                                const PlanWriteOptions &options,
                                ::ds::plan::Plan &p);

/// Fills `ins`'s kind (from its kernel name) and the typed fields its
/// readers use from the kernel's parameters `params`: asynchrony, the
/// optimizer's settings, operand transposes, the gathered axis and
/// vocabulary, the pipeline mark, and the collectives it runs.
void addTypedFields(const ::ds::plan::Plan &p, DictionaryAttr params,
                    ::ds::plan::Instruction &ins);

/// Fills `ins`'s FLOPs, bytes and phase: `op`'s ds.flops, ds.bytes and
/// ds.phase when it has them, else the kind table's estimates (`section`:
/// the part of the step the instruction is in).
LogicalResult addCosts(Operation *op, const ::ds::plan::Plan &p,
                       ::ds::plan::Instruction &ins, ::ds::plan::Phase section);

/// --cluster: checks that the cluster can run `p` (an error on `module`
/// otherwise), predicts its step and writes the prediction to
/// options.views.predicted; `timeline` (when not null) receives a flat
/// plan's predicted schedule.
LogicalResult predictOnCluster(ModuleOp module, const ::ds::plan::Plan &p,
                               const PlanWriteOptions &options,
                               ::ds::Timeline *timeline);
/// The forward-only evaluation section of a flat plan (EvalSection.cpp):
/// p.eval, or p.eval_refused saying why there is none.
void addEvalSection(ModuleOp module, ::ds::plan::Plan &p);
/// The report's line on it: its instructions and arena peak, or why none.
std::string evalReportLine(const ::ds::plan::Plan &p);

/// Writes `text` to `path` through a temporary file and a rename (an
/// error on `module` otherwise).
LogicalResult writeTextFile(ModuleOp module, const std::string &path,
                            const std::string &text);
} // namespace mlir::ds::plan_writer

#endif // DS_TARGET_PLAN_PLANWRITERIMPL_H

//===- CompileTest.cpp - the compiler as a library, twice in one process --===//
//
// Part of the ds project.
//
// Compiles examples/gpt/gpt.onnx with two different TrainingOptions in one
// process (the library keeps no global state) and checks both plans'
// reports: the world size, the ZeRO stage, the optimizer, the parameter
// count and the per-rank memory that ZeRO-3 divides.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/Compile.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Pipeline/DeepSpeedConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {
struct Compiled {
  llvm::json::Value report = nullptr;
  int64_t peak = -1;
  uint64_t planBytes = 0;
};

/// Compiles the GPT example with `options` into a fresh context and plan
/// file; the report as JSON.
Compiled compileGpt(ds::TrainingOptions options, llvm::StringRef name) {
  DialectRegistry registry;
  registry.insert<ds::DsDialect, dsrt::DsRtDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  options.reportKind = "json";
  options.origin["report"] = "command line";
  llvm::Error valid = ds::validateTrainingOptions(options);
  EXPECT_FALSE(bool(valid)) << llvm::toString(std::move(valid));
  llvm::SmallString<128> plan;
  llvm::sys::fs::createTemporaryFile(name, "plan", plan);
  ds::CompileRequest request;
  request.modelPath = DS_SOURCE_DIR "/examples/gpt/gpt.onnx";
  request.planPath = plan.str().str();
  llvm::Expected<ds::CompileResult> result =
      ds::compile(context, options, request);
  Compiled out;
  if (!result) {
    ADD_FAILURE() << llvm::toString(result.takeError());
    return out;
  }
  out.peak = result->perRankPeak;
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse(ds::formatReport(*result, options));
  if (!json) {
    ADD_FAILURE() << llvm::toString(json.takeError());
    return out;
  }
  out.report = std::move(*json);
  llvm::sys::fs::file_size(plan, out.planBytes);
  llvm::sys::fs::remove(plan);
  return out;
}

int64_t field(const llvm::json::Value &v, llvm::StringRef path) {
  const llvm::json::Object *o = v.getAsObject();
  llvm::StringRef key = path;
  while (o && key.contains('.')) {
    auto [head, rest] = key.split('.');
    o = o->getObject(head);
    key = rest;
  }
  std::optional<int64_t> n = o ? o->getInteger(key) : std::nullopt;
  EXPECT_TRUE(n.has_value()) << "no integer " << path.str();
  return n.value_or(-1);
}
} // namespace

TEST(Compile, TwoOptionSetsInOneProcess) {
  ds::TrainingOptions zero0;
  zero0.optimizerName = "adam";
  ds::TrainingOptions zero3 = zero0;
  zero3.optimizerName = "sgd";
  zero3.momentum = 0.9;
  zero3.zeroStage = 3;
  zero3.worldSize = 2;

  Compiled a = compileGpt(zero0, "zero0");
  Compiled b = compileGpt(zero3, "zero3");
  ASSERT_TRUE(a.report.getAsObject() && b.report.getAsObject());

  EXPECT_EQ(field(a.report, "world_size"), 1);
  EXPECT_EQ(field(a.report, "zero_stage"), 0);
  EXPECT_EQ(*a.report.getAsObject()->getString("optimizer"), "adam");
  EXPECT_EQ(field(b.report, "world_size"), 2);
  EXPECT_EQ(field(b.report, "zero_stage"), 3);
  EXPECT_EQ(*b.report.getAsObject()->getString("optimizer"), "sgd");

  // The same model: the same parameter count (110336 for the GPT example).
  EXPECT_EQ(field(a.report, "psi"), 110336);
  EXPECT_EQ(field(b.report, "psi"), field(a.report, "psi"));
  // fp32 parameters whole on one rank, halved by ZeRO-3 over two.
  EXPECT_EQ(field(a.report, "memory.parameters"), 4 * 110336);
  EXPECT_EQ(field(b.report, "memory.parameters"), 4 * 110336 / 2);
  // Adam keeps two moments per parameter; SGD with momentum one, halved.
  EXPECT_EQ(field(a.report, "memory.optimizer_state"), 2 * 4 * 110336);
  EXPECT_EQ(field(b.report, "memory.optimizer_state"), 4 * 110336 / 2);
  EXPECT_NE(field(a.report, "memory.arena"), field(b.report, "memory.arena"));
  EXPECT_GT(a.peak, b.peak);
  EXPECT_EQ(field(a.report, "per_rank_peak"), a.peak);
  EXPECT_GT(a.planBytes, 0u);
  EXPECT_GT(b.planBytes, 0u);
}

TEST(Compile, OptionErrorsComeBackAsErrors) {
  ds::TrainingOptions options;
  options.optimizerName = "adam";
  options.zeroStage = 5;
  llvm::Error e = ds::validateTrainingOptions(options);
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "--zero=5 is not a ZeRO stage (0, 1, 2 or 3)");

  // A device too small for any plan: an error, not an exit.
  DialectRegistry registry;
  registry.insert<ds::DsDialect, dsrt::DsRtDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  options.zeroStage = 0;
  options.deviceMemory = "1000";
  ds::CompileRequest request;
  request.modelPath = DS_SOURCE_DIR "/examples/gpt/gpt.onnx";
  llvm::Expected<ds::CompileResult> result =
      ds::compile(context, options, request);
  ASSERT_FALSE(bool(result));
  EXPECT_TRUE(llvm::StringRef(llvm::toString(result.takeError()))
                  .starts_with("the plan needs "));
}

TEST(Compile, MemorySearchReturnsItsChoice) {
  // --recompute=auto for a 3 MiB device: no recompute peaks at 3.5 MiB,
  // full recompute at 2.7 MiB; the search returns the budget plan between.
  DialectRegistry registry;
  registry.insert<ds::DsDialect, dsrt::DsRtDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  ds::TrainingOptions options;
  options.optimizerName = "adam";
  options.recompute = "auto";
  options.deviceMemory = "3MiB";
  ds::CompileRequest request;
  request.modelPath = DS_SOURCE_DIR "/examples/gpt/gpt.onnx";
  llvm::Expected<ds::CompileResult> result =
      ds::compile(context, options, request);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  EXPECT_EQ(result->choices.recomputeMode, "budget");
  EXPECT_GT(result->choices.recomputeBudget, 0);
  EXPECT_EQ(result->deviceMemory, 3 * 1024 * 1024);
  EXPECT_LE(result->perRankPeak, result->deviceMemory);
  EXPECT_TRUE(llvm::StringRef(result->searchLog)
                  .starts_with("recompute auto: budget 3145728 bytes"));
}

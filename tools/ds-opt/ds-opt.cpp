//===- ds-opt.cpp - the ds compiler driver --------------------------------===//
//
// Part of the ds project.
//
// On .mlir input ds-opt is an mlir-opt for the ds dialect and passes. On
// .onnx input it imports the model, runs the default pipeline, then any
// passes given on the command line, and emits what --emit asks for.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedConfig.h"
#include "ds/Analysis/ModelSummary.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Import/OnnxImporter.h"
#include "ds/Target/Plan/PlanWriter.h"
#include "ds/Transforms/Passes.h"
#include "ds/Transforms/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;

namespace {
llvm::cl::OptionCategory onnxCategory(
    "ds-opt options for ONNX input (model.onnx)");

llvm::cl::opt<std::string> emitKind(
    "emit",
    llvm::cl::desc("What to write for ONNX input: 'plan' (plan.bin for "
                   "ds-run; -o defaults to plan.bin), 'mlir' (the ds IR after "
                   "the default pipeline and any passes given), 'mlir-import' "
                   "(the IR as imported), 'dsrt' (the planned buffer program) "
                   "or 'summary' (inputs, parameters, loss, op histogram, "
                   "FLOPs)"),
    llvm::cl::value_desc("plan|mlir|mlir-import|dsrt|summary"),
    llvm::cl::init("plan"),
    llvm::cl::cat(onnxCategory));

llvm::cl::opt<std::string> lossName(
    "loss",
    llvm::cl::desc("Graph output to train on (default: the only scalar float "
                   "output)"),
    llvm::cl::value_desc("name"), llvm::cl::cat(onnxCategory));

llvm::cl::list<std::string> inputShapes(
    "input-shape",
    llvm::cl::desc("Static shape of a graph input with dynamic dimensions, "
                   "e.g. --input-shape=tokens:4x64 (a scalar is NAME:scalar); "
                   "repeat for several inputs"),
    llvm::cl::value_desc("name:DxD..."), llvm::cl::cat(onnxCategory));

llvm::cl::opt<bool> printTiming(
    "import-timing",
    llvm::cl::desc("Print the time of the import and of the pipeline to "
                   "stderr"),
    llvm::cl::init(false), llvm::cl::cat(onnxCategory));

llvm::cl::opt<bool> emitGrads(
    "emit-grads",
    llvm::cl::desc("Differentiate the loss (--ds-autodiff) and add the "
                   "gradient of every trainable parameter as an output "
                   "named grad:<parameter>, for checking gradients"),
    llvm::cl::init(false), llvm::cl::cat(onnxCategory));

llvm::cl::OptionCategory trainCategory(
    "ds-opt training options (ONNX input)");
llvm::cl::opt<std::string> optimizerName(
    "optimizer",
    llvm::cl::desc("Compile a training step: autodiff of the loss, then this "
                   "optimizer (adam, adamw, sgd: PyTorch semantics; lamb: "
                   "DeepSpeed's FusedLamb). 'none' "
                   "(the default) compiles the forward pass only"),
    llvm::cl::value_desc("none|adam|adamw|sgd|lamb"), llvm::cl::init("none"),
    llvm::cl::cat(trainCategory));
llvm::cl::opt<double> learningRate("lr", llvm::cl::desc("Learning rate"),
                                   llvm::cl::init(1e-3),
                                   llvm::cl::cat(trainCategory));
llvm::cl::opt<double> beta1("beta1", llvm::cl::desc("Adam beta1"),
                            llvm::cl::init(0.9), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> beta2("beta2", llvm::cl::desc("Adam beta2"),
                            llvm::cl::init(0.999), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> adamEps("eps", llvm::cl::desc("Adam epsilon"),
                              llvm::cl::init(1e-8), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> weightDecay(
    "weight-decay",
    llvm::cl::desc("Weight decay (L2 for adam and sgd, decoupled for adamw)"),
    llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> momentum("momentum", llvm::cl::desc("SGD momentum"),
                               llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> dampening("dampening", llvm::cl::desc("SGD dampening"),
                                llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<std::string> lrSchedule(
    "lr-schedule",
    llvm::cl::desc("Learning-rate schedule, evaluated at run time from the "
                   "step counter: constant, warmup, warmup-cosine, "
                   "warmup-linear"),
    llvm::cl::init("constant"), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> warmupSteps("warmup-steps",
                                   llvm::cl::desc("Linear warmup steps"),
                                   llvm::cl::init(0), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> totalSteps(
    "total-steps",
    llvm::cl::desc("Step at which a decaying schedule reaches --min-lr"),
    llvm::cl::init(0), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> minLr("min-lr",
                            llvm::cl::desc("Learning rate at the end of decay"),
                            llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> gradClip(
    "grad-clip",
    llvm::cl::desc("Clip gradients to this global L2 norm (0: off), as "
                   "torch.nn.utils.clip_grad_norm_"),
    llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> gradAccum(
    "grad-accum",
    llvm::cl::desc("Micro-batches per update: ds-run runs K micro-steps per "
                   "--steps step and applies the mean gradient"),
    llvm::cl::init(1), llvm::cl::cat(trainCategory));
llvm::cl::OptionCategory parallelCategory("ds-opt parallelism options");
llvm::cl::opt<int64_t> worldSize(
    "world-size",
    llvm::cl::desc("Data-parallel ranks (mpirun -np N ds-run plan.bin); each "
                   "rank runs the step on its slice of the global batch"),
    llvm::cl::init(1), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> tensorParallel(
    "tensor-parallel",
    llvm::cl::desc("Ranks per tensor-parallel group (Megatron): each MLP "
                   "block's first weight is split by columns and its second "
                   "by rows over them, found on the IR; --world-size is "
                   "data-parallel x tensor-parallel (ranks dp*T + tp), with "
                   "ZeRO (any stage) over the data-parallel groups"),
    llvm::cl::init(1), llvm::cl::cat(parallelCategory));
llvm::cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    llvm::cl::desc("With --tensor-parallel: keep the activations between the "
                   "blocks (norms, residual adds, biases) in row blocks of "
                   "their leading dimension, 1/T per rank; each block's "
                   "all-reduce becomes a reduce-scatter after it and an "
                   "all-gather before the next (Megatron's sequence "
                   "parallelism)"),
    llvm::cl::init(false), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> pipelineParallel(
    "pipeline-parallel",
    llvm::cl::desc("Pipeline stages P: the forward is cut where the fewest "
                   "activation bytes cross, balancing the stages' FLOPs, and "
                   "each stage becomes its own program in plan.bin (MPMD); "
                   "activations and their gradients pass by send/recv. "
                   "--world-size is data-parallel x tensor-parallel x P "
                   "(rank = stage*DP*T + dp*T + tp)"),
    llvm::cl::init(1), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> microBatches(
    "micro-batches",
    llvm::cl::desc("Micro-batches per step with --pipeline-parallel (the "
                   "model's batch is one micro-batch; DeepSpeed's "
                   "gradient_accumulation_steps). Default: --grad-accum"),
    llvm::cl::init(0), llvm::cl::cat(parallelCategory));
llvm::cl::opt<std::string> pipeSchedule(
    "schedule",
    llvm::cl::desc("Pipeline schedule: gpipe (every forward, then every "
                   "backward), 1f1b (one forward, one backward: at most P "
                   "micro-batches alive per stage) or interleaved:V (each "
                   "rank holds V model chunks, Megatron's interleaved 1F1B; "
                   "M a multiple of P); the report prints its bubble beside "
                   "(P-1)/(V*M+P-1)"),
    llvm::cl::init("1f1b"), llvm::cl::cat(parallelCategory));
// The interleaved schedule's model chunks per pipeline rank (1 otherwise).
int64_t virtualStages = 1;
llvm::cl::opt<int64_t> zeroStage(
    "zero",
    llvm::cl::desc("ZeRO stage (DeepSpeed's semantics): 0 data parallel, "
                   "every rank holds everything; 1 partitions the optimizer "
                   "state (and the fp32 update) over the ranks; 2 also "
                   "reduce-scatters gradients as they are computed; 3 also "
                   "partitions parameters, gathered before each use in "
                   "forward and again in backward"),
    llvm::cl::init(0), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> persistenceThreshold(
    "param-persistence-threshold",
    llvm::cl::desc("ZeRO-3: parameters with fewer elements stay whole on "
                   "every rank (DeepSpeed's stage3_param_persistence_"
                   "threshold; its default is 100000, ds-opt's 0 partitions "
                   "every parameter)"),
    llvm::cl::init(0), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> reduceBucketSize(
    "reduce-bucket-size",
    llvm::cl::desc("Gradients reduced by one collective, in elements "
                   "(DeepSpeed's reduce_bucket_size; 1: one per tensor)"),
    llvm::cl::init(500000000), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> allgatherBucketSize(
    "allgather-bucket-size",
    llvm::cl::desc("ZeRO 1-2: updated parameter shards gathered by one "
                   "collective, in elements (DeepSpeed's "
                   "allgather_bucket_size)"),
    llvm::cl::init(500000000), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> prefetchBucketSize(
    "prefetch-bucket-size",
    llvm::cl::desc("ZeRO-3: parameters gathered by one collective, in "
                   "elements, before the first use of the bucket's first "
                   "parameter, or with --overlap-comm from the previous "
                   "bucket's first use on (DeepSpeed's "
                   "stage3_prefetch_bucket_size)"),
    llvm::cl::init(50000000), llvm::cl::cat(parallelCategory));
llvm::cl::opt<bool> overlapComm(
    "overlap-comm",
    llvm::cl::desc("Start collectives as soon as their inputs exist and wait "
                   "for them just before their results are read, so that "
                   "gradient reduction overlaps the rest of the backward "
                   "pass (DeepSpeed's overlap_comm; "
                   "--overlap-comm=false runs every collective in place)"),
    llvm::cl::init(true), llvm::cl::cat(parallelCategory));
llvm::cl::opt<int64_t> maxInFlight(
    "max-inflight-collectives",
    llvm::cl::desc("With --overlap-comm: collectives in flight at once; each "
                   "gradient bucket in flight holds its whole input, so this "
                   "bounds the memory overlap costs"),
    llvm::cl::init(2), llvm::cl::cat(parallelCategory));
llvm::cl::opt<std::string> commDtypeName(
    "comm-dtype",
    llvm::cl::desc("Element type of the gradient collectives: fp32, bf16 or "
                   "fp16 (default: the --precision; DeepSpeed's "
                   "communication_data_type)"),
    llvm::cl::init(""), llvm::cl::cat(parallelCategory));
llvm::cl::opt<std::string> reportKind(
    "report",
    llvm::cl::desc("With a plan: print per rank the bytes of parameters, "
                   "gradients, optimizer state, buffers, saved activations "
                   "and the arena, the instruction where the arena is "
                   "fullest and its largest live tensors, the per-rank "
                   "total, and the collective bytes per step and how many "
                   "overlap computation, beside the ZeRO formulas' values; "
                   "with --recompute the choice beside none, every-layer "
                   "and full, and the segments. --report=json prints one "
                   "JSON object instead"),
    llvm::cl::value_desc("table|json"), llvm::cl::ValueOptional,
    llvm::cl::init(""), llvm::cl::cat(parallelCategory));
llvm::cl::opt<std::string> precisionName(
    "precision",
    llvm::cl::desc("Training precision: fp32 (default), bf16 or fp16 (16-bit "
                   "weights, compute and gradients; fp32 master copies of "
                   "the weights and fp32 optimizer state; softmax/LayerNorm/"
                   "losses/reductions in fp32; fp16 with DeepSpeed's loss "
                   "scaler, see --loss-scale)"),
    llvm::cl::init("fp32"), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> lossScale(
    "loss-scale",
    llvm::cl::desc("fp16: a static loss scale; 0 (default) scales "
                   "dynamically as DeepSpeed's DynamicLossScaler"),
    llvm::cl::init(0.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> initialScalePower(
    "initial-scale-power",
    llvm::cl::desc("fp16: the dynamic scale starts at 2^this (DeepSpeed: 16)"),
    llvm::cl::init(16), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> lossScaleWindow(
    "loss-scale-window",
    llvm::cl::desc("fp16: clean steps since the last overflow after which "
                   "the scale doubles (DeepSpeed: 1000)"),
    llvm::cl::init(1000), llvm::cl::cat(trainCategory));
llvm::cl::opt<int64_t> hysteresis(
    "hysteresis",
    llvm::cl::desc("fp16: overflows tolerated before the scale halves "
                   "(DeepSpeed: 2)"),
    llvm::cl::init(2), llvm::cl::cat(trainCategory));
llvm::cl::opt<bool> consecutiveHysteresis(
    "consecutive-hysteresis",
    llvm::cl::desc("fp16: refill the hysteresis on every clean step"),
    llvm::cl::init(false), llvm::cl::cat(trainCategory));
llvm::cl::opt<double> minLossScale(
    "min-loss-scale",
    llvm::cl::desc("fp16: the dynamic scale never goes below this "
                   "(DeepSpeed: 1)"),
    llvm::cl::init(1.0), llvm::cl::cat(trainCategory));
llvm::cl::opt<bool> trainingInfo(
    "training-info",
    llvm::cl::desc("Train with the model's own training_info algorithm (ONNX "
                   "semantics): its Gradient and optimizer nodes run after "
                   "the graph, its update_binding updates the initializers"),
    llvm::cl::init(false), llvm::cl::cat(trainCategory));
llvm::cl::opt<bool> nesterov("nesterov", llvm::cl::desc("SGD Nesterov momentum"),
                             llvm::cl::init(false), llvm::cl::cat(trainCategory));

llvm::cl::OptionCategory memoryCategory("ds-opt memory options");
llvm::cl::opt<std::string> recomputeSpec(
    "recompute",
    llvm::cl::desc("Activation recomputation: none (keep every activation "
                   "the backward pass reads), full (recompute every forward "
                   "segment from its kept input), every-layer (keep layer "
                   "inputs only, as Megatron/DeepSpeed checkpointing), "
                   "budget=SIZE (the least extra FLOPs whose per-rank peak "
                   "fits SIZE, e.g. 2GiB) or auto (the same for "
                   "--device-memory)"),
    llvm::cl::value_desc("none|full|every-layer|auto|budget=SIZE"),
    llvm::cl::init("none"), llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> offloadOptimizer(
    "offload-optimizer",
    llvm::cl::desc("Where the optimizer state and the f32 master weights "
                   "live: none (the device), cpu (host memory; the "
                   "optimizer step runs on the host) or nvme:PATH (a swap "
                   "file per rank in folder PATH, read and written with "
                   "asynchronous I/O)"),
    llvm::cl::value_desc("none|cpu|nvme:PATH"), llvm::cl::init("none"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> offloadParam(
    "offload-param",
    llvm::cl::desc("Where the ZeRO-3 parameter shards live: none, cpu or "
                   "nvme:PATH (needs --zero=3); each is copied to the "
                   "device just before its all-gather"),
    llvm::cl::value_desc("none|cpu|nvme:PATH"), llvm::cl::init("none"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> offloadMode(
    "offload",
    llvm::cl::desc("none: offload only as --offload-optimizer and "
                   "--offload-param say; auto: when --device-memory "
                   "cannot be met with recompute alone, offload the "
                   "optimizer state to cpu, then (ZeRO-3) the parameters"),
    llvm::cl::value_desc("none|auto"), llvm::cl::init("none"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> pcieBandwidth(
    "pcie-bandwidth",
    llvm::cl::desc("Host-device copy rate the cost model assumes, bytes/s "
                   "(e.g. 25GB, 12GiB); default 25 GB/s, PCIe 4.0 x16 in "
                   "practice"),
    llvm::cl::value_desc("SIZE"), llvm::cl::init("25GB"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> nvmeBandwidth(
    "nvme-bandwidth",
    llvm::cl::desc("NVMe read/write rate the cost model assumes, bytes/s; "
                   "default 3 GB/s, one PCIe 4.0 NVMe drive"),
    llvm::cl::value_desc("SIZE"), llvm::cl::init("3GB"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> aioBlockSize(
    "aio-block-size",
    llvm::cl::desc("NVMe offload: bytes per I/O request (DeepSpeed's "
                   "aio.block_size); default 1MiB"),
    llvm::cl::value_desc("SIZE"), llvm::cl::init("1MiB"),
    llvm::cl::cat(memoryCategory));
llvm::cl::opt<int> aioQueueDepth(
    "aio-queue-depth",
    llvm::cl::desc("NVMe offload: I/O requests in flight (DeepSpeed's "
                   "aio.queue_depth); default 8"),
    llvm::cl::init(8), llvm::cl::cat(memoryCategory));
llvm::cl::opt<int> aioThreads(
    "aio-threads",
    llvm::cl::desc("NVMe offload: io_uring instances the requests are dealt "
                   "over, each with its own kernel workers (DeepSpeed's "
                   "aio.thread_count); default 1"),
    llvm::cl::init(1), llvm::cl::cat(memoryCategory));
llvm::cl::opt<std::string> deviceMemory(
    "device-memory",
    llvm::cl::desc("Memory of one rank's device (e.g. 80GiB, 512MiB, "
                   "1000000): a plan whose per-rank peak (parameters, "
                   "buffers, optimizer state and the arena) exceeds it is "
                   "refused with the minimum it needs; --recompute=auto "
                   "fits it"),
    llvm::cl::value_desc("SIZE"), llvm::cl::init(""),
    llvm::cl::cat(memoryCategory));

llvm::cl::opt<std::string> configPath(
    "config",
    llvm::cl::desc("A DeepSpeed config (ds_config.json): its optimizer, "
                   "fp16/bf16, gradient_clipping, communication_data_type, "
                   "zero_optimization and batch keys set the matching "
                   "options (docs/config.md has the table); flags given on "
                   "the command line override it; keys ds does not support "
                   "are refused by name"),
    llvm::cl::value_desc("ds_config.json"), llvm::cl::init(""),
    llvm::cl::cat(trainCategory));
llvm::cl::opt<bool> showOptions(
    "show-options",
    llvm::cl::desc("Print the options in effect (after --config and the "
                   "flags) and where each came from, then exit"),
    llvm::cl::init(false), llvm::cl::cat(trainCategory));

llvm::cl::OptionCategory costCategory("ds-opt cost model and plan views");
llvm::cl::opt<std::string> emitTrace(
    "emit-trace",
    llvm::cl::desc("Write the planned step as a Chrome/Perfetto trace (open "
                   "in ui.perfetto.dev or chrome://tracing): a process per "
                   "rank with tracks compute, communication and copies; "
                   "kernel times from the cost model"),
    llvm::cl::value_desc("trace.json"), llvm::cl::init(""),
    llvm::cl::cat(costCategory));
llvm::cl::opt<std::string> emitMemoryPlot(
    "emit-memory-plot",
    llvm::cl::desc("Draw one rank's memory over the step as SVG, stacked by "
                   "kind (parameters/buffers/state, saved activations, "
                   "transients, workspace, collective buffers), with the "
                   "planned peak, the fullest point and --device-memory"),
    llvm::cl::value_desc("mem.svg"), llvm::cl::init(""),
    llvm::cl::cat(costCategory));
llvm::cl::opt<double> costFlops(
    "cost-flops",
    llvm::cl::desc("Cost model: FLOP/s of one rank (default 1.8e11, this "
                   "2-core CPU's measured sgemm)"),
    llvm::cl::init(180e9), llvm::cl::cat(costCategory));
llvm::cl::opt<double> costMemBandwidth(
    "cost-mem-bandwidth",
    llvm::cl::desc("Cost model: memory bytes/s of one rank (default 2e10)"),
    llvm::cl::init(20e9), llvm::cl::cat(costCategory));
llvm::cl::opt<double> costLinkBandwidth(
    "cost-link-bandwidth",
    llvm::cl::desc("Cost model: collective bytes/s of one rank's link "
                   "(default 5e9)"),
    llvm::cl::init(5e9), llvm::cl::cat(costCategory));

llvm::cl::opt<bool> listOnnxOps(
    "list-onnx-ops",
    llvm::cl::desc("Print the ONNX op types the importer supports and exit"),
    llvm::cl::init(false), llvm::cl::cat(onnxCategory));

/// Prints diagnostics as one line each: `error: file: message`.
std::string describeLocation(Location loc, bool &isNode) {
  isNode = false;
  if (auto name = dyn_cast<NameLoc>(loc)) {
    bool dummy;
    std::string file = describeLocation(name.getChildLoc(), dummy);
    isNode = true;
    return file + (file.empty() ? "" : ": ") + "node '" +
           name.getName().str() + "'";
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string s = file.getFilename().str();
    if (file.getLine() != 0)
      s += ":" + std::to_string(file.getLine()) + ":" +
           std::to_string(file.getColumn());
    return s;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      return describeLocation(fused.getLocations().front(), isNode);
  return "";
}

/// Bytes from "80GiB", "512MiB", "1.5GB", "64KiB" or a plain number.
std::optional<int64_t> parseBytes(StringRef text) {
  StringRef num = text.take_while(
      [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == 'e'; });
  StringRef unit = text.drop_front(num.size()).trim();
  double value;
  if (num.empty() || num.getAsDouble(value) || value < 0)
    return std::nullopt;
  double scale = 1;
  std::string u = unit.lower();
  if (u.empty() || u == "b") scale = 1;
  else if (u == "kb") scale = 1e3;
  else if (u == "mb") scale = 1e6;
  else if (u == "gb") scale = 1e9;
  else if (u == "tb") scale = 1e12;
  else if (u == "kib" || u == "k") scale = 1024.0;
  else if (u == "mib" || u == "m") scale = 1024.0 * 1024;
  else if (u == "gib" || u == "g") scale = 1024.0 * 1024 * 1024;
  else if (u == "tib" || u == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  double bytes = value * scale;
  if (bytes > 9.2e18)
    return std::nullopt;
  return static_cast<int64_t>(bytes);
}

std::string mib(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << bytes << " bytes (" << llvm::format("%.1f", bytes / 1048576.0)
     << " MiB)";
  return s;
}

/// A lowered plan's per-rank peak: parameters, buffers and optimizer state
/// (dsrt.param storage) plus the planned arena.
int64_t perRankPeak(ModuleOp module) {
  // Pipeline parallelism: the largest stage's.
  if (SmallVector<ModuleOp> stages = ds::pipelineStages(module);
      !stages.empty()) {
    int64_t peak = 0;
    for (ModuleOp m : stages)
      peak = std::max(peak, perRankPeak(m));
    return peak;
  }
  int64_t total = 0;
  module.walk([&](func::FuncOp f) {
    if (auto a = f->getAttrOfType<IntegerAttr>(dsrt::kArenaBytes))
      total += a.getInt();
    // Device memory only: offloaded storage lives on the host or NVMe.
    f.walk([&](dsrt::ParamOp p) {
      if (!p->hasAttr("dsrt.space"))
        total += dsrt::bufferBytes(p.getType());
    });
  });
  return total;
}

DictionaryAttr recomputeSummary(ModuleOp module) {
  DictionaryAttr d;
  module.walk([&](func::FuncOp f) {
    if (auto a = f->getAttrOfType<DictionaryAttr>("ds.recompute"))
      d = a;
  });
  return d;
}

/// The recompute section of --report: the chosen plan beside none,
/// every-layer and full (the cost model's activation bytes and extra
/// FLOPs), and the segments.
std::string formatRecompute(DictionaryAttr d, int64_t peak, int64_t limit) {
  std::string s;
  llvm::raw_string_ostream os(s);
  auto pair = [&](StringRef k) {
    auto a = d.getAs<DenseI64ArrayAttr>(k);
    return a && a.size() == 2 ? std::make_pair(a[0], a[1])
                              : std::make_pair(int64_t(0), int64_t(0));
  };
  auto intOf = [&](StringRef k) {
    auto a = d.getAs<IntegerAttr>(k);
    return a ? a.getInt() : 0;
  };
  double step = std::max<int64_t>(1, intOf("step_flops"));
  os << "recompute (" << d.getAs<StringAttr>("mode").getValue()
     << "): per-rank peak " << mib(peak);
  if (limit > 0)
    os << ", device memory " << mib(limit);
  os << "\n  " << llvm::left_justify("plan", 12)
     << llvm::right_justify("activation bytes", 18)
     << llvm::right_justify("extra FLOPs", 16)
     << llvm::right_justify("of the step", 13) << "\n";
  for (auto [name, key] : {std::pair<StringRef, StringRef>{"none", "none"},
                           {"every-layer", "every_layer"},
                           {"full", "full"},
                           {"chosen", "chosen"}}) {
    auto [act, flops] = pair(key);
    os << "  " << llvm::left_justify(name, 12) << llvm::right_justify(
                                                        std::to_string(act), 18)
       << llvm::right_justify(std::to_string(flops), 16)
       << llvm::right_justify(
              (llvm::formatv("{0:F1}%", 100.0 * flops / step)).str(), 13)
       << "\n";
  }
  auto saved = d.getAs<DenseI64ArrayAttr>("seg_saved");
  auto input = d.getAs<DenseI64ArrayAttr>("seg_input");
  auto flops = d.getAs<DenseI64ArrayAttr>("seg_flops");
  auto rc = d.getAs<DenseI64ArrayAttr>("seg_recomputable");
  auto chosen = d.getAs<DenseI64ArrayAttr>("seg_chosen");
  os << "  step FLOPs " << intOf("step_flops") << "; always kept (cut values, "
     << "outputs, segments that cannot be recomputed) " << intOf("fixed")
     << " bytes; layers: " << intOf("layers") << " ("
     << intOf("layer_period") << " segment(s) each)\n";
  os << "  recompute planning (segments, costs, choice, rewrite): "
     << llvm::format("%.1f", intOf("planning_us") / 1000.0) << " ms\n";
  if (d.getAs<StringAttr>("mode").getValue() == "budget")
    os << "  activation budget (model) " << intOf("budget") << " bytes\n";
  if (saved && input && flops && rc && chosen)
    for (int64_t j = 0; j < static_cast<int64_t>(saved.size()); ++j)
      os << "  segment " << j << ": input " << input[j] << " B, saved "
         << saved[j] << " B, forward " << flops[j] << " FLOPs, "
         << (!rc[j] ? "kept (not recomputable)"
                    : chosen[j] ? "recomputed" : "kept")
         << "\n";
  return s;
}

/// The recompute summary attribute as JSON (numbers, strings, arrays).
std::string recomputeJson(DictionaryAttr d) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "{";
  bool first = true;
  for (NamedAttribute a : d) {
    os << (first ? "" : ", ") << "\"" << a.getName().getValue() << "\": ";
    first = false;
    if (auto i = dyn_cast<IntegerAttr>(a.getValue())) {
      os << i.getInt();
    } else if (auto str = dyn_cast<StringAttr>(a.getValue())) {
      os << "\"" << str.getValue() << "\"";
    } else if (auto arr = dyn_cast<DenseI64ArrayAttr>(a.getValue())) {
      os << "[";
      llvm::interleave(arr.asArrayRef(), os, ", ");
      os << "]";
    } else {
      os << "null";
    }
  }
  os << "}";
  return s;
}

/// Options set by --config: flag -> the config key, and the config's
/// per-rank micro-batch (0: none given).
std::map<std::string, std::string> fromConfig;
int64_t configMicroBatch = 0;

/// A DeepSpeed config sets the options the command line leaves alone.
/// Returns 1 after printing an error.
int applyConfig() {
  if (!configPath.empty()) {
    dsconfig::DeepSpeedConfig dsc;
    std::string err;
    if (!dsconfig::readDeepSpeedConfig(configPath, dsc, err)) {
      llvm::errs() << "error: " << err << "\n";
      return 1;
    }
    auto &registered = llvm::cl::getRegisteredOptions();
    for (const dsconfig::ConfigSetting &set : dsc.settings) {
      llvm::cl::Option *o = registered.lookup(set.flag);
      if (!o) {
        llvm::errs() << "error: " << configPath << ": '" << set.key
                     << "' maps to --" << set.flag
                     << ", which this ds-opt lacks\n";
        return 1;
      }
      if (o->getNumOccurrences() > 0 && !fromConfig.count(set.flag))
        continue; // the command line wins
      if (o->addOccurrence(0, set.flag, set.value)) {
        llvm::errs() << "error: " << configPath << ": '" << set.key
                     << "' = " << set.value << " is not a valid --"
                     << set.flag << "\n";
        return 1;
      }
      fromConfig[set.flag] = set.key;
    }
    int64_t accum = 1;
    // The batch is per data-parallel rank: the world over the tensor-parallel
    // groups.
    int64_t grid = tensorParallel * pipelineParallel;
    int64_t dpRanks =
        grid > 0 && worldSize % grid == 0 ? worldSize / grid : worldSize;
    if (!dsconfig::resolveBatch(dsc, dpRanks, configMicroBatch, accum, err)) {
      llvm::errs() << "error: " << configPath << ": " << err << "\n";
      return 1;
    }
    if (gradAccum.getNumOccurrences() == 0 && accum != 1) {
      gradAccum = accum;
      fromConfig["grad-accum"] = "the batch sizes";
    }
  }
  return 0;
}

int runOnnx(StringRef inputFilename, StringRef outputFilename,
            const std::string &commandLine, DialectRegistry &registry,
            const MlirOptMainConfig &config) {
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  int errors = 0;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    const char *severity = "error";
    switch (diag.getSeverity()) {
    case DiagnosticSeverity::Error: ++errors; break;
    case DiagnosticSeverity::Warning: severity = "warning"; break;
    case DiagnosticSeverity::Remark: severity = "remark"; break;
    case DiagnosticSeverity::Note: severity = "note"; break;
    }
    std::string msg = diag.str();
    bool isNode;
    std::string where = describeLocation(diag.getLocation(), isNode);
    // Importer messages already start with the node; keep only the file.
    if (isNode && StringRef(msg).starts_with("node '"))
      where = where.substr(0, where.find(": node '"));
    llvm::errs() << severity << ": " << where << (where.empty() ? "" : ": ")
                 << msg << "\n";
    return success();
  });

  bool printReport = reportKind.getNumOccurrences() > 0;
  bool jsonReport = reportKind == "json";
  if (printReport && !reportKind.empty() && reportKind != "json" &&
      reportKind != "table") {
    llvm::errs() << "error: --report='" << reportKind
                 << "' is not one of table, json\n";
    return 1;
  }
  ds::ImportOptions options;
  options.lossName = lossName;
  options.runTrainingInfo = trainingInfo;
  for (const std::string &spec : inputShapes) {
    std::string err = ds::parseInputShape(spec, options);
    if (!err.empty()) {
      llvm::errs() << "error: " << err << "\n";
      return 1;
    }
  }

  if (printTiming)
    options.onPhase = [](StringRef phase, double ms) {
      llvm::errs() << "import " << phase << ": " << llvm::format("%.1f", ms)
                   << " ms\n";
    };
  auto t0 = std::chrono::steady_clock::now();
  FailureOr<OwningOpRef<ModuleOp>> module =
      ds::importOnnxFile(&context, inputFilename, options);
  auto t1 = std::chrono::steady_clock::now();
  if (failed(module) || errors)
    return 1;

  // The config's micro-batch is the plan's per-rank batch: the leading
  // dimension of the model's data inputs.
  if (configMicroBatch > 0) {
    int64_t modelBatch = -1;
    (**module)->walk([&](func::FuncOp f) {
      for (unsigned i = 0; i < f.getNumArguments() && modelBatch < 0; ++i)
        if (f.getArgAttr(i, "ds.input"))
          if (auto t = dyn_cast<RankedTensorType>(f.getArgumentTypes()[i]);
              t && t.getRank() > 0)
            modelBatch = t.getDimSize(0);
    });
    if (modelBatch >= 0 && modelBatch != configMicroBatch) {
      llvm::errs() << "error: " << configPath
                   << ": train_micro_batch_size_per_gpu is "
                   << configMicroBatch << " (from the batch sizes on "
                   << worldSize << " rank(s)), but the model's inputs have "
                   << "batch " << modelBatch
                   << " (re-export, or fix it with --input-shape)\n";
      return 1;
    }
  }
  if (showOptions) {
    auto show = [&](StringRef flag, const std::string &value) {
      auto it = fromConfig.find(flag.str());
      llvm::cl::Option *o = llvm::cl::getRegisteredOptions().lookup(flag);
      llvm::outs() << "--" << flag << "=" << value << "  ("
                   << (it != fromConfig.end()
                           ? "config: " + it->second
                           : o && o->getNumOccurrences() > 0
                                 ? std::string("command line")
                                 : std::string("default"))
                   << ")\n";
    };
    auto num = [](double v) {
      std::string s;
      llvm::raw_string_ostream os(s);
      os << llvm::format("%.9g", v);
      return s;
    };
    show("optimizer", optimizerName);
    show("lr", num(learningRate));
    show("beta1", num(beta1));
    show("beta2", num(beta2));
    show("eps", num(adamEps));
    show("weight-decay", num(weightDecay));
    show("momentum", num(momentum));
    show("dampening", num(dampening));
    show("nesterov", nesterov ? "true" : "false");
    show("grad-clip", num(gradClip));
    show("grad-accum", std::to_string(gradAccum));
    show("precision", precisionName);
    show("loss-scale", num(lossScale));
    show("initial-scale-power", std::to_string(initialScalePower));
    show("loss-scale-window", std::to_string(lossScaleWindow));
    show("hysteresis", std::to_string(hysteresis));
    show("consecutive-hysteresis", consecutiveHysteresis ? "true" : "false");
    show("min-loss-scale", num(minLossScale));
    show("world-size", std::to_string(worldSize));
    show("tensor-parallel", std::to_string(tensorParallel));
    show("sequence-parallel", sequenceParallel ? "true" : "false");
    show("pipeline-parallel", std::to_string(pipelineParallel));
    show("micro-batches", std::to_string(microBatches));
    show("schedule", pipeSchedule);
    show("zero", std::to_string(zeroStage));
    show("comm-dtype", commDtypeName.empty() ? precisionName.getValue()
                                             : commDtypeName.getValue());
    show("reduce-bucket-size", std::to_string(reduceBucketSize));
    show("allgather-bucket-size", std::to_string(allgatherBucketSize));
    show("prefetch-bucket-size", std::to_string(prefetchBucketSize));
    show("param-persistence-threshold", std::to_string(persistenceThreshold));
    show("overlap-comm", overlapComm ? "true" : "false");
    show("recompute", recomputeSpec);
    show("device-memory", deviceMemory);
    show("offload-optimizer", offloadOptimizer);
    show("offload-param", offloadParam);
    show("offload", offloadMode);
    show("aio-block-size", aioBlockSize);
    show("aio-queue-depth", std::to_string(aioQueueDepth));
    show("aio-threads", std::to_string(aioThreads));
    return 0;
  }

  // Offload: where the optimizer state and ZeRO-3 parameters live (none,
  // host or nvme) and the NVMe folder.
  std::string offOpt = "none", offParam = "none", nvmePath;
  auto parseOffload = [&](StringRef flag, StringRef spec,
                          std::string &space) -> bool {
    if (spec == "none" || spec == "cpu" || spec == "host") {
      space = spec == "none" ? "none" : "host";
      return true;
    }
    if (spec.starts_with("nvme:") && spec.size() > 5) {
      std::string path = spec.drop_front(5).str();
      if (!nvmePath.empty() && nvmePath != path) {
        llvm::errs() << "error: --offload-optimizer and --offload-param "
                        "name two NVMe folders ('"
                     << nvmePath << "', '" << path << "'); give one\n";
        return false;
      }
      nvmePath = path;
      space = "nvme";
      return true;
    }
    llvm::errs() << "error: --" << flag << "='" << spec
                 << "' is not none, cpu or nvme:PATH\n";
    return false;
  };
  if (!parseOffload("offload-optimizer", offloadOptimizer, offOpt) ||
      !parseOffload("offload-param", offloadParam, offParam))
    return 1;
  if (offloadMode != "none" && offloadMode != "auto") {
    llvm::errs() << "error: --offload='" << offloadMode
                 << "' is not none or auto\n";
    return 1;
  }
  std::optional<int64_t> pcieRate = parseBytes(pcieBandwidth),
                         nvmeRate = parseBytes(nvmeBandwidth),
                         aioBlock = parseBytes(aioBlockSize);
  if (!pcieRate || *pcieRate <= 0 || !nvmeRate || *nvmeRate <= 0) {
    llvm::errs() << "error: --pcie-bandwidth and --nvme-bandwidth are "
                    "positive sizes per second (e.g. 25GB), got '"
                 << pcieBandwidth << "' and '" << nvmeBandwidth << "'\n";
    return 1;
  }
  if (!aioBlock || *aioBlock < 4096 || *aioBlock % 4096 ||
      *aioBlock > (int64_t(1) << 30) || aioQueueDepth < 1 ||
      aioQueueDepth > 1024 || aioThreads < 1 || aioThreads > 64) {
    llvm::errs() << "error: --aio-block-size must be a multiple of 4096 "
                    "bytes up to 1GiB, --aio-queue-depth 1..1024 and "
                    "--aio-threads 1..64 (got '"
                 << aioBlockSize << "', " << aioQueueDepth << " and "
                 << aioThreads << ")\n";
    return 1;
  }

  ds::PipelineSplit lastSplit; // the stages of the last pipeline split
  // The pipeline on a copy of the imported module, with a recompute mode
  // (and for "budget" its activation budget); `lower` through the memory
  // plan.
  auto compile = [&](OwningOpRef<ModuleOp> &out, StringRef rMode,
                     int64_t rBudget, bool lower) -> LogicalResult {
    out = OwningOpRef<ModuleOp>((**module).clone());
    PassManager pre(&context);
    pre.addPass(createCanonicalizerPass());
    pre.addPass(createCSEPass());
    bool training = optimizerName != "none";
    if (tensorParallel > 1) {
      ds::TensorParallelPassOptions tp;
      tp.size = tensorParallel;
      tp.sequence = sequenceParallel;
      pre.addNestedPass<func::FuncOp>(ds::createTensorParallelPass(tp));
    }
    if (failed(pre.run(*out)) || errors)
      return failure();
    // Pipeline parallelism: the rest runs on each stage's module.
    SmallVector<ModuleOp> targets{*out};
    if (pipelineParallel > 1) {
      FailureOr<ds::PipelineSplit> split = ds::splitPipeline(
          *out, pipelineParallel * virtualStages, pipelineParallel);
      if (failed(split) || errors)
        return failure();
      lastSplit = *split;
      targets = ds::pipelineStages(*out);
    }
    for (ModuleOp target : targets) {
    PassManager pm(&context);
    if (emitGrads || training) {
      if (precisionName != "fp32") {
        ds::MixedPrecisionPassOptions mp;
        mp.precision = precisionName;
        pm.addNestedPass<func::FuncOp>(ds::createMixedPrecisionPass(mp));
      }
      pm.addNestedPass<func::FuncOp>(ds::createAutodiffPass());
      if (training) { // mode none too: the report compares the plans
        ds::RecomputePassOptions rc;
        rc.mode = rMode.str();
        rc.budget = rBudget;
        pm.addNestedPass<func::FuncOp>(ds::createRecomputePass(rc));
      }
      int64_t dpSize = worldSize / (tensorParallel * pipelineParallel);
      if (training && (dpSize > 1 || zeroStage > 0)) {
        ds::ZeroPassOptions dp;
        dp.worldSize = dpSize; // the data-parallel group
        dp.stage = zeroStage;
        dp.persistenceThreshold = persistenceThreshold;
        dp.reduceBucketSize = reduceBucketSize;
        dp.commDtype = commDtypeName.empty() ? std::string(precisionName)
                                             : std::string(commDtypeName);
        dp.prefetchBucketSize = prefetchBucketSize;
        pm.addNestedPass<func::FuncOp>(ds::createZeroPass(dp));
      }
      if (training) {
        ds::OptimizerPassOptions opt;
        opt.optimizer = optimizerName;
        opt.lr = learningRate;
        opt.beta1 = beta1;
        opt.beta2 = beta2;
        opt.eps = adamEps;
        opt.weightDecay = weightDecay;
        opt.momentum = momentum;
        opt.dampening = dampening;
        opt.nesterov = nesterov;
        opt.schedule = lrSchedule;
        opt.warmupSteps = warmupSteps;
        opt.totalSteps = totalSteps;
        opt.minLr = minLr;
        opt.gradClip = gradClip;
        opt.gradAccum = gradAccum;
        opt.allgatherBucketSize = allgatherBucketSize;
        opt.masterWeights = offOpt != "none";
        pm.addNestedPass<func::FuncOp>(ds::createOptimizerPass(opt));
      }
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
      if (training && (offOpt != "none" || offParam != "none")) {
        ds::OffloadPassOptions off;
        off.optimizer = offOpt;
        off.param = offParam;
        pm.addNestedPass<func::FuncOp>(ds::createOffloadPass(off));
      }
    }
    if (failed(config.setupPassPipeline(pm)))
      return failure();
    if (lower) {
      pm.addPass(ds::createLowerToDsRtPass());
      if (overlapComm) {
        ds::OverlapCommPassOptions ov;
        ov.maxInFlight = maxInFlight;
        pm.addNestedPass<func::FuncOp>(ds::createOverlapCommPass(ov));
      }
      pm.addNestedPass<func::FuncOp>(ds::createPlanMemoryPass());
    }
    if (failed(pm.run(target)) || errors)
      return failure();
    }
    return success();
  };

  // The recompute mode, and for budget/auto the cheapest plan that fits.
  bool training = optimizerName != "none";
  std::optional<int64_t> limit;
  if (!deviceMemory.empty() && !(limit = parseBytes(deviceMemory))) {
    llvm::errs() << "error: --device-memory='" << deviceMemory
                 << "' is not a size (e.g. 80GiB, 512MiB, 1000000)\n";
    return 1;
  }
  std::string rMode = recomputeSpec;
  std::optional<int64_t> budget;
  if (StringRef(rMode).starts_with("budget=")) {
    budget = parseBytes(StringRef(rMode).drop_front(7));
    if (!budget) {
      llvm::errs() << "error: --recompute='" << rMode
                   << "': the budget is not a size (e.g. budget=2GiB)\n";
      return 1;
    }
    rMode = "budget";
  } else if (rMode == "auto") {
    budget = limit;
  } else if (rMode != "none" && rMode != "full" && rMode != "every-layer") {
    llvm::errs() << "error: --recompute='" << rMode
                 << "' is not one of none, full, every-layer, auto, "
                    "budget=SIZE\n";
    return 1;
  }
  if (pipelineParallel > 1 &&
      (rMode == "budget" || (rMode == "auto" && limit) || offloadMode == "auto")) {
    llvm::errs() << "error: --pipeline-parallel=" << pipelineParallel
                 << " with a memory search (--recompute=auto with "
                    "--device-memory, budget=SIZE, or --offload=auto) is not "
                    "supported yet: give --recompute=none, full or "
                    "every-layer\n";
    return 1;
  }
  if (rMode != "none" && !training) {
    llvm::errs() << "error: --recompute=" << recomputeSpec
                 << " is for training (give --optimizer=...)\n";
    return 1;
  }
  if ((!emitTrace.empty() || !emitMemoryPlot.empty()) && emitKind != "plan") {
    llvm::errs() << "error: --emit-trace and --emit-memory-plot come with a "
                    "plan (--emit=plan, the default)\n";
    return 1;
  }
  bool lowerFinal = emitKind == "plan" || emitKind == "dsrt";
  OwningOpRef<ModuleOp> result;
  std::string searchLog;
  int64_t peak = -1;
  // The budget search's lowered plan of the chosen mode, and its peak: the
  // plan to write when a plan is what --emit asks for (not compiled again).
  OwningOpRef<ModuleOp> searched;
  int64_t searchedPeak = -1;
  if (!training && (offOpt != "none" || offParam != "none")) {
    llvm::errs() << "error: offload is for training (give --optimizer=...)\n";
    return 1;
  }
  if (offloadMode == "auto" && emitKind != "mlir-import") {
    // Offload only what recompute alone cannot fit: the optimizer state
    // first (DeepSpeed's ZeRO-Offload), then at ZeRO-3 the parameters.
    if (!limit || !training) {
      llvm::errs() << "error: --offload=auto fits --device-memory in a "
                      "training plan: give both --device-memory and "
                      "--optimizer\n";
      return 1;
    }
    StringRef probeMode = (rMode == "auto" || rMode == "budget")
                              ? StringRef("full") : StringRef(rMode);
    OwningOpRef<ModuleOp> probe;
    if (failed(compile(probe, probeMode, 0, true)))
      return 1;
    int64_t before = perRankPeak(*probe), now = before;
    std::string chose;
    if (now > *limit && offOpt == "none") {
      offOpt = "host";
      chose = "--offload-optimizer=cpu";
      if (failed(compile(probe, probeMode, 0, true)))
        return 1;
      now = perRankPeak(*probe);
    }
    if (now > *limit && offParam == "none" && zeroStage == 3) {
      offParam = "host";
      chose += chose.empty() ? "--offload-param=cpu" : " --offload-param=cpu";
      if (failed(compile(probe, probeMode, 0, true)))
        return 1;
      now = perRankPeak(*probe);
    }
    searchLog += "offload auto: " +
                 (chose.empty() ? std::string("nothing offloaded, ") +
                                      mib(before) + " fits with recompute"
                                : "chose " + chose + ": the device peak " +
                                      mib(before) + " became " + mib(now)) +
                 " (--recompute=" + probeMode.str() + ")\n";
  }
  if (emitKind == "mlir-import") {
    result = OwningOpRef<ModuleOp>((**module).clone());
  } else if (rMode == "budget" || rMode == "auto") {
    if (!budget) {
      // auto without a device size: nothing to fit.
      rMode = "none";
      searchLog += "recompute auto: no --device-memory, every activation "
                  "is kept\n";
    } else {
      // Keep everything if it fits; else the least recompute whose planned
      // peak fits, found with the real memory plan: the pass's budget is
      // the activation bytes its model may keep, lowered by any
      // overshoot of the planned peak until the plan fits.
      OwningOpRef<ModuleOp> none, full;
      if (failed(compile(none, "none", 0, true)))
        return 1;
      int64_t peakNone = perRankPeak(*none);
      if (peakNone <= *budget) {
        rMode = "none";
        searched = std::move(none);
        searchedPeak = peakNone;
        searchLog += "recompute " + recomputeSpec + ": every activation "
                    "kept, the peak " + mib(peakNone) + " fits " +
                    mib(*budget) + "\n";
      } else {
        if (failed(compile(full, "full", 0, true)))
          return 1;
        int64_t peakFull = perRankPeak(*full);
        if (peakFull > *budget) {
          llvm::errs() << "error: a per-rank peak of " << mib(*budget)
                       << " is below the minimum feasible budget of "
                       << mib(peakFull) << " (--recompute=full; without "
                       << "recompute " << mib(peakNone) << ")\n";
          return 1;
        }
        DictionaryAttr sum = recomputeSummary(*full);
        int64_t actNone = sum.getAs<DenseI64ArrayAttr>("none")[0];
        int64_t actMin = sum.getAs<DenseI64ArrayAttr>("full")[0];
        int64_t target = actNone - (peakNone - *budget);
        rMode = "full";
        int tries = 0;
        for (; tries < 16 && target >= actMin; ++tries) {
          OwningOpRef<ModuleOp> trial;
          if (failed(compile(trial, "budget", target, true)))
            return 1;
          int64_t p = perRankPeak(*trial);
          if (p <= *budget) {
            rMode = "budget";
            searched = std::move(trial);
            searchedPeak = p;
            break;
          }
          // Lower by the overshoot, and below what this plan keeps, so that
          // the next plan differs.
          int64_t kept =
              recomputeSummary(*trial).getAs<DenseI64ArrayAttr>("chosen")[0];
          target = std::min(target - (p - *budget), kept - 1);
        }
        searchLog += "recompute " + recomputeSpec + ": budget " +
                    mib(*budget) + "; none peaks at " + mib(peakNone) +
                    ", full at " + mib(peakFull) + "; " +
                    (rMode == "budget"
                         ? "chose the cheapest plan keeping " +
                               std::to_string(target) +
                               " activation bytes (model) after " +
                               std::to_string(tries + 1) + " plan(s)"
                         : std::string("no cheaper plan fits: full")) +
                    "\n";
        budget = target;
        if (rMode == "full") {
          searched = std::move(full);
          searchedPeak = peakFull;
        }
      }
    }
  }
  if (emitKind != "mlir-import") {
    if (searched && lowerFinal) {
      result = std::move(searched);
    } else if (failed(compile(result, rMode, budget.value_or(0), lowerFinal))) {
      return 1;
    }
    if (lowerFinal)
      peak = perRankPeak(*result);
    else if (searchedPeak >= 0)
      peak = searchedPeak;
    if (!lowerFinal && limit && peak < 0) {
      OwningOpRef<ModuleOp> probe;
      if (failed(compile(probe, rMode, budget.value_or(0), true)))
        return 1;
      peak = perRankPeak(*probe);
    }
    if (limit && peak > *limit) {
      OwningOpRef<ModuleOp> full;
      int64_t minimum = peak;
      if (training && succeeded(compile(full, "full", 0, true)))
        minimum = std::min(minimum, perRankPeak(*full));
      llvm::errs() << "error: the plan needs " << mib(peak)
                   << " per rank, more than --device-memory=" << deviceMemory
                   << " (" << mib(*limit) << "); the minimum feasible is "
                   << mib(minimum)
                   << (training ? " (--recompute=full)" : "") << "\n";
      return 1;
    }
  }
  *module = std::move(result);
  auto t2 = std::chrono::steady_clock::now();
  if (printTiming) {
    auto ms = [](auto d) {
      return std::chrono::duration<double, std::milli>(d).count();
    };
    llvm::errs() << "import total: " << llvm::format("%.1f", ms(t1 - t0))
                 << " ms\npipeline: " << llvm::format("%.1f", ms(t2 - t1))
                 << " ms\n";
  }

  if (emitKind == "plan") {
    ds::PlanWriteOptions planOptions;
    planOptions.weightsPath = inputFilename.str();
    planOptions.compileOptions["command"] = commandLine;
    planOptions.compileOptions["loss"] = lossName;
    planOptions.compileOptions["optimizer"] = optimizerName;
    planOptions.compileOptions["precision"] = precisionName;
    planOptions.compileOptions["comm_dtype"] =
        commDtypeName.empty() ? precisionName : std::string(commDtypeName);
    if (precisionName == "fp16") {
      planOptions.compileOptions["loss_scale"] = std::to_string(lossScale);
      planOptions.compileOptions["initial_scale_power"] =
          std::to_string(initialScalePower);
      planOptions.compileOptions["loss_scale_window"] =
          std::to_string(lossScaleWindow);
      planOptions.compileOptions["hysteresis"] = std::to_string(hysteresis);
      planOptions.compileOptions["consecutive_hysteresis"] =
          consecutiveHysteresis ? "1" : "0";
      planOptions.compileOptions["min_loss_scale"] = std::to_string(minLossScale);
    }
    planOptions.worldSize = worldSize;
    planOptions.nvmePath = nvmePath;
    planOptions.aioBlockSize = static_cast<uint32_t>(*aioBlock);
    planOptions.aioQueueDepth = static_cast<uint32_t>(aioQueueDepth);
    planOptions.aioThreads = static_cast<uint32_t>(aioThreads);
    planOptions.views.pcieBytesPerSecond = static_cast<double>(*pcieRate);
    planOptions.views.nvmeBytesPerSecond = static_cast<double>(*nvmeRate);
    if (offOpt != "none" || offParam != "none") {
      planOptions.compileOptions["offload_optimizer"] = offOpt;
      planOptions.compileOptions["offload_param"] = offParam;
    }
    for (const std::string &spec : inputShapes)
      planOptions.compileOptions["input-shape:" + spec] = spec;
    std::string reportText;
    if (printReport)
      planOptions.report = &reportText;
    planOptions.reportJson = jsonReport;
    // The cost model's view: the estimate for the report, the trace and
    // the memory plot.
    std::string costText;
    planOptions.views.flopsPerSecond = costFlops;
    planOptions.views.bytesPerSecond = costMemBandwidth;
    planOptions.views.linkBytesPerSecond = costLinkBandwidth;
    planOptions.views.tracePath = emitTrace;
    planOptions.views.memoryPlotPath = emitMemoryPlot;
    planOptions.views.budget = static_cast<uint64_t>(limit.value_or(0));
    planOptions.views.plotTitle =
        "per-rank memory over one step: " +
        llvm::sys::path::filename(inputFilename).str() + ", ZeRO-" +
        std::to_string(zeroStage) + ", " + std::to_string(worldSize) +
        " rank(s), " + precisionName + ", recompute " + rMode;
    if (pipelineParallel > 1) {
      // The report is the pipeline's: per stage, with the schedule.
      planOptions.pipeline.microBatches = microBatches;
      planOptions.pipeline.schedule =
          virtualStages > 1 ? std::string("interleaved")
                            : std::string(pipeSchedule);
      planOptions.pipeline.virtualStages = virtualStages;
      planOptions.pipeline.tied = lastSplit.tied;
      planOptions.pipeline.cutPoints = lastSplit.cutPoints;
      for (const ds::PipelineStage &st : lastSplit.stages)
        planOptions.pipeline.stages.push_back(
            {st.firstOp, st.lastOp, st.flops, st.sendBytes});
      if (failed(ds::writePlan(**module, outputFilename, planOptions)) ||
          errors)
        return 1;
      llvm::outs() << reportText;
      if (printReport && !jsonReport)
        llvm::outs() << searchLog;
      return 0;
    }
    if (printReport && !jsonReport)
      planOptions.views.costReport = &costText;
    if (jsonReport)
      planOptions.views.costJson = &costText;
    if (failed(ds::writePlan(**module, outputFilename, planOptions)) || errors)
      return 1;
    if (jsonReport) {
      // One object: the footprint, then the peak and the recompute choice.
      StringRef body = StringRef(reportText).rtrim().drop_back();
      llvm::outs() << body << ", \"cost\": " << costText
                   << ", \"per_rank_peak\": " << peak
                   << ", \"device_memory\": " << limit.value_or(0)
                   << ", \"recompute\": ";
      if (DictionaryAttr d = recomputeSummary(**module))
        llvm::outs() << recomputeJson(d);
      else
        llvm::outs() << "null";
      llvm::outs() << "}\n";
      return 0;
    }
    llvm::outs() << reportText;
    if (printReport) {
      llvm::outs() << costText;
      llvm::outs() << searchLog;
      if (DictionaryAttr d = recomputeSummary(**module))
        llvm::outs() << formatRecompute(d, peak, limit.value_or(0));
      else
        llvm::outs() << "per-rank peak " << mib(peak) << "\n";
    }
    return 0;
  }

  std::string errorMessage;
  auto output = openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << "error: " << errorMessage << "\n";
    return 1;
  }
  if (emitKind == "summary") {
    FailureOr<ds::ModelSummary> summary = ds::summarize(**module);
    if (failed(summary))
      return 1;
    ds::printSummary(*summary, output->os());
  } else {
    (*module)->print(output->os());
    output->os() << "\n";
  }
  output->keep();
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  DialectRegistry registry;
  registry.insert<ds::DsDialect, dsrt::DsRtDialect, func::FuncDialect>();
  ds::registerDsPasses();
  registerCanonicalizerPass();
  registerCSEPass();
  registerSymbolDCEPass();
  registerInlinerPass();

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv,
      "ds-opt: the ds training compiler.\n\n"
      "  ds-opt model.onnx [--emit=...] [-o FILE]   import an ONNX model\n"
      "  ds-opt file.mlir --ds-<pass> ...           run passes on ds IR\n",
      registry);

  if (applyConfig())
    return 1;
  if (listOnnxOps) {
    for (const std::string &op : ds::supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (emitKind != "plan" && emitKind != "mlir" && emitKind != "mlir-import" &&
      emitKind != "dsrt" && emitKind != "summary") {
    llvm::errs() << "error: --emit='" << emitKind
                 << "' is not one of plan, mlir, mlir-import, dsrt, summary\n";
    return 1;
  }
  if (optimizerName != "none" && optimizerName != "adam" &&
      optimizerName != "adamw" && optimizerName != "sgd" &&
      optimizerName != "lamb") {
    llvm::errs() << "error: --optimizer='" << optimizerName
                 << "' is not one of none, adam, adamw, sgd, lamb\n";
    return 1;
  }
  if (learningRate < 0 || weightDecay < 0 || momentum < 0) {
    llvm::errs() << "error: --lr, --weight-decay and --momentum must not be "
                    "negative (--lr="
                 << learningRate << ")\n";
    return 1;
  }
  if (lrSchedule != "constant" && lrSchedule != "warmup" &&
      lrSchedule != "warmup-cosine" && lrSchedule != "warmup-linear") {
    llvm::errs() << "error: --lr-schedule='" << lrSchedule
                 << "' is not one of constant, warmup, warmup-cosine, "
                    "warmup-linear\n";
    return 1;
  }
  if (worldSize < 1) {
    llvm::errs() << "error: --world-size must be at least 1, got "
                 << static_cast<int64_t>(worldSize) << "\n";
    return 1;
  }
  if (tensorParallel < 1 ||
      (pipelineParallel == 1 && worldSize % tensorParallel != 0)) {
    llvm::errs() << "error: --world-size=" << static_cast<int64_t>(worldSize)
                 << " is not data-parallel x tensor-parallel with "
                    "--tensor-parallel="
                 << static_cast<int64_t>(tensorParallel) << "\n";
    return 1;
  }
  if (sequenceParallel && tensorParallel < 2) {
    llvm::errs() << "error: --sequence-parallel splits the activations over "
                    "a tensor-parallel group; give --tensor-parallel=T with "
                    "T > 1\n";
    return 1;
  }
  if (tensorParallel > 1 && optimizerName == "none") {
    llvm::errs() << "error: --tensor-parallel="
                 << static_cast<int64_t>(tensorParallel)
                 << " needs a training step (--optimizer=...)\n";
    return 1;
  }
  if (pipelineParallel < 1 ||
      worldSize % (tensorParallel * pipelineParallel) != 0) {
    llvm::errs() << "error: --world-size=" << static_cast<int64_t>(worldSize)
                 << " is not data-parallel x tensor-parallel x "
                    "pipeline-parallel with --tensor-parallel="
                 << static_cast<int64_t>(tensorParallel)
                 << " and --pipeline-parallel="
                 << static_cast<int64_t>(pipelineParallel) << " ("
                 << static_cast<int64_t>(tensorParallel * pipelineParallel)
                 << " does not divide it)\n";
    return 1;
  }
  if (pipelineParallel > 1) {
    auto fail = [](const std::string &m) {
      llvm::errs() << "error: " << m << "\n";
      return 1;
    };
    std::string p = "--pipeline-parallel=" + std::to_string(pipelineParallel);
    if (optimizerName == "none")
      return fail(p + " needs a training step (--optimizer=...)");
    if (zeroStage > 1)
      return fail(p + " with --zero=" + std::to_string(zeroStage) +
                  " is not supported (ZeRO stages 0 and 1 only, as in "
                  "DeepSpeed: gradients are reduced once per micro-batch)");
    if (StringRef(pipeSchedule).starts_with("interleaved")) {
      StringRef v = StringRef(pipeSchedule).drop_front(11);
      if (!v.consume_front(":") || v.getAsInteger(10, virtualStages) ||
          virtualStages < 2 || virtualStages > 64)
        return fail("--schedule=" + pipeSchedule +
                    ": give interleaved:V with V from 2 to 64 model chunks "
                    "per pipeline rank");
    } else if (pipeSchedule != "gpipe" && pipeSchedule != "1f1b") {
      return fail("--schedule='" + pipeSchedule +
                  "' is not one of gpipe, 1f1b, interleaved:V");
    }
    if (microBatches < 0)
      return fail("--micro-batches must be at least 1, got " +
                  std::to_string(microBatches));
    if (microBatches == 0)
      microBatches = gradAccum;
    else if (gradAccum.getNumOccurrences() > 0 && gradAccum != microBatches)
      return fail("--micro-batches=" + std::to_string(microBatches) +
                  " and --grad-accum=" + std::to_string(gradAccum) +
                  " disagree: with pipeline parallelism the micro-batches "
                  "are the accumulation steps");
    gradAccum = microBatches;
    if (virtualStages > 1 && microBatches % pipelineParallel != 0)
      return fail("--schedule=" + pipeSchedule + " needs --micro-batches a "
                  "multiple of " + p + " (it runs them in groups of P), got " +
                  std::to_string(microBatches));
    if (precisionName == "fp16")
      return fail(p + " with --precision=fp16 (loss scaling) is not "
                  "supported yet; use bf16 or fp32");
    if (gradClip > 0)
      return fail(p + " with --grad-clip is not supported yet (the norm "
                  "spans the stages)");
    if (offloadOptimizer != "none" || offloadParam != "none")
      return fail(p + " with offload is not supported yet");
  } else if (microBatches.getNumOccurrences() > 0 ||
             pipeSchedule.getNumOccurrences() > 0) {
    llvm::errs() << "error: --micro-batches and --schedule are for "
                    "--pipeline-parallel (use --grad-accum without it)\n";
    return 1;
  }
  if (zeroStage < 0 || zeroStage > 3) {
    llvm::errs() << "error: --zero=" << static_cast<int64_t>(zeroStage)
                 << " is not a ZeRO stage (0, 1, 2 or 3)\n";
    return 1;
  }
  if (precisionName != "fp32" && precisionName != "bf16" &&
      precisionName != "fp16") {
    llvm::errs() << "error: --precision='" << precisionName
                 << "' is not one of fp32, fp16, bf16\n";
    return 1;
  }
  if (lossScale < 0 || lossScaleWindow < 1 || hysteresis < 1 ||
      minLossScale <= 0 || initialScalePower < 0 || initialScalePower > 64) {
    llvm::errs() << "error: loss scaler options out of range (--loss-scale "
                    ">= 0, --loss-scale-window >= 1, --hysteresis >= 1, "
                    "--min-loss-scale > 0, --initial-scale-power 0-64)\n";
    return 1;
  }
  if (precisionName == "fp16" && gradAccum > 1) {
    llvm::errs() << "error: --precision=fp16 with --grad-accum is not "
                    "supported yet\n";
    return 1;
  }
  if (precisionName != "fp32" && optimizerName == "none" && !emitGrads) {
    llvm::errs() << "error: --precision=" << precisionName
                 << " is for training (give --optimizer=...)\n";
    return 1;
  }
  if (!commDtypeName.empty() && commDtypeName != "fp32" &&
      commDtypeName != "bf16" && commDtypeName != "fp16") {
    llvm::errs() << "error: --comm-dtype='" << commDtypeName
                 << "' is not one of fp32, bf16, fp16\n";
    return 1;
  }
  if (maxInFlight < 1) {
    llvm::errs() << "error: --max-inflight-collectives must be at least 1\n";
    return 1;
  }
  if (reduceBucketSize < 1 || allgatherBucketSize < 1 ||
      prefetchBucketSize < 1) {
    llvm::errs() << "error: --reduce-bucket-size, --allgather-bucket-size "
                    "and --prefetch-bucket-size must be at least 1\n";
    return 1;
  }
  if (persistenceThreshold < 0) {
    llvm::errs() << "error: --param-persistence-threshold must not be "
                    "negative\n";
    return 1;
  }
  if (zeroStage > 0 && optimizerName == "none") {
    llvm::errs() << "error: --zero=" << static_cast<int64_t>(zeroStage)
                 << " partitions a training step; give --optimizer=...\n";
    return 1;
  }
  if (worldSize > 1 && optimizerName == "none" && tensorParallel == 1) {
    llvm::errs() << "error: --world-size needs a training step "
                    "(--optimizer=...)\n";
    return 1;
  }
  if (gradAccum < 1) {
    llvm::errs() << "error: --grad-accum must be at least 1, got "
                 << static_cast<int64_t>(gradAccum) << "\n";
    return 1;
  }
  if (gradClip < 0 || warmupSteps < 0 || totalSteps < 0) {
    llvm::errs() << "error: --grad-clip, --warmup-steps and --total-steps "
                    "must not be negative\n";
    return 1;
  }
  if (trainingInfo && (emitGrads || optimizerName != "none")) {
    llvm::errs() << "error: --training-info trains with the model's own "
                    "algorithm; it excludes --optimizer and --emit-grads\n";
    return 1;
  }
  if (emitGrads && optimizerName != "none") {
    llvm::errs() << "error: --emit-grads and --optimizer exclude each other\n";
    return 1;
  }
  if (StringRef(inputFilename).ends_with_insensitive(".onnx")) {
    MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
    // A plan is binary: without -o it goes to plan.bin, not the terminal.
    bool outputGiven = false;
    std::string commandLine;
    for (int i = 0; i < argc; ++i) {
      StringRef arg(argv[i]);
      outputGiven |= arg == "-o" || arg.starts_with("-o=") ||
                     arg == "--o" || arg.starts_with("--o=");
      commandLine += (i ? " " : "") + arg.str();
    }
    std::string out = outputFilename;
    if (emitKind == "plan" && !outputGiven)
      out = "plan.bin";
    if (emitKind == "plan" && out == "-") {
      llvm::errs() << "error: a plan is binary; give a file with -o\n";
      return 1;
    }
    return runOnnx(inputFilename, out, commandLine, registry, config);
  }
  return asMainReturnCode(
      MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}

//===- DeepSpeedConfig.cpp - ds_config.json to training options ----------===//
//
// Part of the ds project.
//
// The top level of a DeepSpeed config: which keys ds reads (each section
// has its reader in DeepSpeedConfigSections.cpp), which it accepts without
// a counterpart (with a notice), which it refuses and why; then the batch
// triad. Every problem is reported at once.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/DeepSpeedConfig.h"
#include "ConfigReader.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::config;

namespace {

/// Top-level DeepSpeed keys that have no ds option: accepted without
/// effect (a notice unless the value is the harmless one), accepted only
/// when off, or refused, each with its reason.
const std::map<std::string, KnownKey> &knownTopKeys() {
  using K = KnownKey;
  static const std::map<std::string, KnownKey> m = {
      {"zero_allow_untested_optimizer",
       {K::NoOp, "ds runs its own optimizers, all of them tested"}},
      {"zero_force_ds_cpu_optimizer",
       {K::NoOp, "offload always runs ds's host optimizer"}},
      {"prescale_gradients",
       {K::NoOp, "ds averages the gradients once, in --comm-dtype; the mean "
                 "is the same, only its rounding differs"}},
      {"gradient_predivide_factor",
       {K::NoOp, "ds averages the gradients once, in --comm-dtype; the mean "
                 "is the same, only its rounding differs"}},
      {"dump_state", {K::NoOp, "ds-opt --report prints the plan"}},
      {"memory_breakdown",
       {K::NoOp, "ds-opt --report gives the planned memory, which ds-run "
                 "checks"}},
      {"wandb", {K::NoOp, "wandb is not written (no network; ds-run's "
                          "tensorboard and csv_monitor files hold the same "
                          "scalars)"}},
      {"comet", {K::NoOp, "no comet logs yet; ds-run --log-json FILE logs "
                          "loss, learning rate and time per step"}},
      {"monitor_config",
       {K::NoOp, "no monitor files yet; ds-run --log-json FILE logs loss, "
                 "learning rate and time per step"}},
      {"comms_config",
       {K::NoOp, "ds-opt --report lists every collective and its bytes"}},
      {"autotuning",
       {K::NoOp, "ds plans ahead of time (ds-opt's recompute and offload "
                 "searches); there are no trial runs"}},
      {"checkpoint", {K::NoOp, "ds-run --save and --resume checkpoint"}},
      {"cuda_visible_devices", {K::NoOp, "the launcher chooses devices"}},
      {"seq_parallel_communication_data_type",
       {K::NoOp, "ds's sequence parallelism communicates in --comm-dtype"}},
      {"sparse_attention",
       {K::OffOnly, "ds trains the exported graph's attention as written"}},
      {"progressive_layer_drop",
       {K::OffOnly, "it changes which layers run at each step"}},
      {"elasticity", {K::OffOnly, "a plan has a fixed world size"}},
      {"compression_training", {K::OffOnly, "not available"}},
      {"data_efficiency", {K::OffOnly, "not available"}},
      {"curriculum_learning", {K::OffOnly, "not available"}},
      {"amp", {K::OffOnly, "use fp16 or bf16"}},
      {"sparse_gradients", {K::OffOnly, "gradients are dense"}},
      {"quantize_training",
       {K::OffOnly, "MoQ quantization-aware training is not available"}},
      {"eigenvalue",
       {K::NoOp, "ds computes no Hessian eigenvalues (DeepSpeed uses them "
                 "for MoQ's schedule only, which ds does not have)"}},
      {"disable_allgather",
       {K::NoOp, "ds all-gathers ZeRO partitions; the values are those "
                 "DeepSpeed's broadcasts give"}},
  };
  return m;
}

/// The keys ds reads.
const std::vector<std::string> topKeys = {"train_batch_size",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "optimizer",
                                          "scheduler",
                                          "fp16",
                                          "bf16",
                                          "bfloat16",
                                          "gradient_clipping",
                                          "communication_data_type",
                                          "zero_optimization",
                                          "activation_checkpointing",
                                          "aio",
                                          "tensor_parallel",
                                          "pipeline",
                                          "sequence_parallel_size",
                                          "ds",
                                          // Monitors and logging.
                                          "steps_per_print",
                                          "wall_clock_breakdown",
                                          "tensorboard",
                                          "csv_monitor",
                                          "comms_logger",
                                          "flops_profiler"};

bool readTopKey(Reader &r, const std::string &key, const Value &v) {
  if (key == "train_batch_size" || key == "train_micro_batch_size_per_gpu" ||
      key == "gradient_accumulation_steps")
    return readBatchKey(r, key, v);
  if (key == "gradient_clipping")
    return r.plain(v, key, key);
  if (key == "communication_data_type")
    return readCommDtype(r, key, v);
  if (key == "optimizer")
    return readOptimizer(r, key, v);
  if (key == "scheduler")
    return readScheduler(r, key, v);
  if (key == "fp16" || key == "bf16" || key == "bfloat16")
    return readPrecision(r, key, v);
  if (key == "zero_optimization")
    return readZero(r, key, v);
  if (key == "activation_checkpointing")
    return readCheckpointing(r, key, v);
  if (key == "tensor_parallel" || key == "pipeline")
    return readParallelism(r, key, v);
  if (key == "aio")
    return readAio(r, key, v);
  if (key == "ds")
    return readDsExtensions(r, key, v);
  if (key == "steps_per_print" || key == "wall_clock_breakdown" ||
      key == "tensorboard" || key == "csv_monitor" || key == "comms_logger" ||
      key == "flops_profiler")
    return readMonitorKey(r, key, v);
  if (key == "sequence_parallel_size") {
    auto n = r.integer(v, key);
    if (n && *n > 1)
      return r.fail(key, "is not supported yet (DeepSpeed-Ulysses; ds's own "
                         "sequence parallelism splits the tensor-parallel "
                         "group: --sequence-parallel)");
    return n.has_value();
  }
  return true;
}

/// zero_optimization.stage3_max_live_parameters (DeepSpeed: the gathered
/// parameter elements resident at once). ZeRO-3 gathers in buckets of
/// --prefetch-bucket-size elements, the bucket in use and the next one in
/// flight, so at most half of the limit goes to a bucket. A bucket closes
/// at the parameter that reaches its size, and a parameter stays gathered
/// until its last use in the pass, so one parameter larger than the half,
/// or one used far apart, can still exceed it: the notice says so.
void capGatherBucket(llvm::StringRef path, const DeepSpeedConfig &dsc,
                     TrainingOptions &options) {
  if (!dsc.maxLiveParameters)
    return;
  int64_t half = std::max<int64_t>(1, *dsc.maxLiveParameters / 2);
  std::string key = "zero_optimization.stage3_max_live_parameters";
  std::string where = path.str() + ": '" + key + "': ";
  if (options.prefetchBucketSize <= half)
    return;
  if (options.origin.lookup("prefetch-bucket-size") == "command line") {
    options.configNotices.push_back(
        where + "not applied: --prefetch-bucket-size given on the command "
                "line wins (it allows " +
        std::to_string(2 * options.prefetchBucketSize) +
        " gathered elements)");
    return;
  }
  options.configNotices.push_back(
      where + "ZeRO-3's gather bucket --prefetch-bucket-size " +
      std::to_string(options.prefetchBucketSize) + " -> " +
      std::to_string(half) +
      " (the bucket in use and the one prefetched within the limit; a "
      "parameter larger than that, or used far apart, stays gathered "
      "whole)");
  options.prefetchBucketSize = half;
  options.origin["prefetch-bucket-size"] = "config: " + key;
}

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The config's problems as one error: the only one on the file's line,
/// or a count and one per line.
llvm::Error problems(llvm::StringRef path,
                     const std::vector<std::string> &errors) {
  if (errors.size() == 1)
    return fail(path + ": " + errors.front());
  std::string text = path.str() + ": " + std::to_string(errors.size()) +
                     " problems (all listed):";
  for (const std::string &e : errors)
    text += "\n  " + e;
  return fail(text);
}
} // namespace

llvm::Error mlir::ds::readDeepSpeedConfig(llvm::StringRef path,
                                          DeepSpeedConfig &config) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return fail("cannot read the config '" + path +
                "': " + buffer.getError().message());
  // DeepSpeed reads its config with hjson: comments and trailing commas
  // are allowed. Quoteless strings and keys are not (a JSON error).
  std::string text = stripHjson((*buffer)->getBuffer());
  llvm::Expected<Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return fail(path +
                " is not valid JSON: " + llvm::toString(parsed.takeError()));
  const Object *top = parsed->getAsObject();
  if (!top)
    return fail(path + ": the config must be a JSON object");
  Reader r{path.str(), config, {}};
  // Keys starting with '_' are comments ("_comment": "...").
  Object keys;
  for (const auto &kv : *top)
    if (!llvm::StringRef(kv.first).starts_with("_"))
      keys[kv.first] = kv.second;
  r.checkKeys(keys, "", topKeys, knownTopKeys());
  std::vector<std::string> sorted;
  for (const auto &kv : keys)
    sorted.push_back(kv.first.str());
  std::sort(sorted.begin(), sorted.end());
  for (const std::string &key : sorted)
    if (llvm::is_contained(topKeys, key))
      readTopKey(r, key, *keys.get(key));
  // fp16 and bf16 both enabled: a conflict.
  int precisions = 0;
  for (const ConfigSetting &s : config.settings)
    precisions += s.flag == "precision";
  if (precisions > 1)
    r.fail("", "fp16 and bf16 are both enabled; enable one");
  return r.errors.empty() ? llvm::Error::success() : problems(path, r.errors);
}

llvm::Error mlir::ds::applyDeepSpeedConfig(llvm::StringRef path,
                                           TrainingOptions &options) {
  DeepSpeedConfig dsc;
  if (llvm::Error e = readDeepSpeedConfig(path, dsc))
    return e;
  std::vector<std::string> overridden;
  for (const ConfigSetting &set : dsc.settings) {
    const OptionInfo *info = findOption(set.flag);
    if (!info)
      return fail(path + ": '" + set.key + "' maps to --" + set.flag +
                  ", which this ds-opt lacks");
    if (options.origin.lookup(set.flag) == "command line") {
      // The command line wins, and says so: never a silent override.
      overridden.push_back(path.str() + ": '" + set.key + "' = " +
                           set.value + " is overridden by --" + set.flag +
                           " given by the caller (command line or "
                           "ds.initialize)");
      continue;
    }
    if (llvm::Error e = setOption(options, *info, set.value)) {
      llvm::consumeError(std::move(e));
      return fail(path + ": '" + set.key + "' = " + set.value +
                  " is not a valid --" + set.flag);
    }
    options.origin[set.flag] = "config: " + set.key;
  }
  options.configNotices = dsc.notices;
  llvm::append_range(options.configNotices, overridden);
  capGatherBucket(path, dsc, options);
  for (const auto &kv : dsc.autoValues)
    options.configAutoKeys.push_back(kv.first);
  if (!dsc.autoValues.empty()) {
    std::sort(dsc.autoValues.begin(), dsc.autoValues.end());
    std::string line = path.str() + ": \"auto\" values:";
    for (size_t i = 0; i < dsc.autoValues.size(); ++i)
      line += (i ? "; " : " ") + dsc.autoValues[i].first + " = " +
              dsc.autoValues[i].second;
    options.configNotices.push_back(line);
  }
  // The batch is per data-parallel rank: the world over the tensor- and
  // pipeline-parallel groups.
  int64_t grid = options.tensorParallel * options.pipelineParallel;
  int64_t dpRanks = grid > 0 && options.worldSize % grid == 0
                        ? options.worldSize / grid
                        : options.worldSize;
  int64_t accum = 1;
  if (llvm::Error e =
          resolveBatch(dsc, dpRanks, options.configMicroBatch, accum))
    return fail(path + ": " + llvm::toString(std::move(e)));
  if (!options.isGiven("grad-accum") && accum != 1) {
    options.gradAccum = accum;
    options.origin["grad-accum"] = "config: the batch sizes";
  }
  return llvm::Error::success();
}

llvm::Error mlir::ds::resolveBatch(DeepSpeedConfig &c, int64_t world,
                                   int64_t &micro, int64_t &accum) {
  std::string err;
  auto failed = [&]() {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), err);
  };
  // Each size is at most 2^31 (checked when read): products of two of them
  // and the world size stay within int64 for up to 2^31 ranks.
  if (world < 1 || world > (int64_t(1) << 31)) {
    err = "the world size " + std::to_string(world) + " is out of range";
    return failed();
  }
  auto text = [&]() {
    std::string s = "train_batch_size " +
                    (c.trainBatch ? std::to_string(*c.trainBatch) : "-") +
                    ", train_micro_batch_size_per_gpu " +
                    (c.microBatch ? std::to_string(*c.microBatch) : "-") +
                    ", gradient_accumulation_steps " +
                    (c.accumSteps ? std::to_string(*c.accumSteps) : "-") +
                    " on " + std::to_string(world) + " rank(s)";
    return s;
  };
  auto product = [](int64_t a, int64_t b, int64_t w, int64_t &out) {
    return !__builtin_mul_overflow(a, b, &out) &&
           !__builtin_mul_overflow(out, w, &out);
  };
  if (c.trainBatch && c.microBatch && c.accumSteps) {
    int64_t want = 0;
    if (!product(*c.microBatch, *c.accumSteps, world, want))
      want = 0; // overflowed: they cannot agree
    if (*c.trainBatch != want) {
      err = "the batch sizes disagree: " + text() +
            " (train_batch_size must be micro x accumulation x ranks" +
            (want ? " = " + std::to_string(want) : std::string()) + ")";
      return failed();
    }
    micro = *c.microBatch;
    accum = *c.accumSteps;
  } else if (c.trainBatch && c.microBatch) {
    int64_t d = *c.microBatch * world;
    if (*c.trainBatch % d) {
      err = "the batch sizes do not divide: " + text();
      return failed();
    }
    micro = *c.microBatch;
    accum = *c.trainBatch / d;
  } else if (c.trainBatch && c.accumSteps) {
    int64_t d = *c.accumSteps * world;
    if (*c.trainBatch % d) {
      err = "the batch sizes do not divide: " + text();
      return failed();
    }
    micro = *c.trainBatch / d;
    accum = *c.accumSteps;
  } else if (c.microBatch) {
    micro = *c.microBatch;
    accum = c.accumSteps.value_or(1);
  } else if (c.trainBatch) {
    if (*c.trainBatch % world) {
      err = "the batch sizes do not divide: " + text();
      return failed();
    }
    micro = *c.trainBatch / world;
    accum = 1;
  } else {
    micro = 0; // the model's own batch
    accum = c.accumSteps.value_or(1);
  }
  int64_t total = 0;
  if (micro && !product(micro, accum, world, total)) {
    err = "the batch sizes overflow: " + text();
    return failed();
  }
  c.trainBatch = micro ? std::optional<int64_t>(total) : std::nullopt;
  return llvm::Error::success();
}

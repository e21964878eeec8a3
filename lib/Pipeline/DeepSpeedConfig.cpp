//===- DeepSpeedConfig.cpp - ds_config.json to training options ----------===//
//
// Part of the ds project.
//
// One reader per section of the config (batch, optimizer, fp16/bf16,
// zero_optimization and its offload, activation checkpointing, tensor and
// pipeline parallelism, aio, ds's own keys); a key that maps plainly onto
// an option takes the option's type from TrainingOptions.def.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/DeepSpeedConfig.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

using namespace mlir;
using namespace mlir::ds;

namespace {

using llvm::json::Object;
using llvm::json::Value;

/// DeepSpeed keys ds knows but does not support yet, with the reason.
const std::map<std::string, std::string> &unsupported() {
  static const std::map<std::string, std::string> m = {
      {"scheduler", "DeepSpeed's schedulers start one step earlier than ds's "
                    "--lr-schedule; give --lr-schedule, --warmup-steps, "
                    "--total-steps and --min-lr instead"},
      {"steps_per_print", "ds-run prints every step"},
      {"wall_clock_breakdown", "use ds-run --profile"},
      {"dump_state", "not available"},
      {"prescale_gradients", "gradients are averaged after the reduction"},
      {"gradient_predivide_factor", "gradients are averaged after the "
                                    "reduction"},
      {"sparse_gradients", "not available"},
      {"amp", "use fp16 or bf16"},
      {"tensorboard", "use ds-run --log-json"},
      {"wandb", "use ds-run --log-json"},
      {"csv_monitor", "use ds-run --log-json"},
      {"comet", "use ds-run --log-json"},
      {"flops_profiler", "ds-opt --report gives the FLOPs"},
      {"elasticity", "not available"},
      {"compression_training", "not available"},
      {"data_efficiency", "not available"},
      {"curriculum_learning", "not available"},
      {"checkpoint", "use ds-run --save/--resume"},
      {"zero_allow_untested_optimizer", "not needed"},
      {"zero_force_ds_cpu_optimizer",
       "offload always runs ds's host optimizer"},
      {"sequence_parallel_size", "not available"},
  };
  return m;
}

/// Keys of each section, for nearest-key suggestions.
const std::vector<std::string> topKeys = {"train_batch_size",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "optimizer",
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
                                          "ds"};

std::string fmt(double v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.17g", v);
  return s;
}

/// The option a DeepSpeed key sets, or null.
const OptionInfo *findOptionByKey(llvm::StringRef configKey) {
  for (const OptionInfo &o : trainingOptionTable())
    if (o.configKey == configKey)
      return &o;
  return nullptr;
}

struct Reader {
  std::string file, err;
  DeepSpeedConfig &config;

  void set(const std::string &flag, const std::string &value,
           const std::string &key) {
    config.settings.push_back({flag, value, key});
  }

  bool fail(const std::string &key, const std::string &msg) {
    if (err.empty())
      err = file + ": " + (key.empty() ? "" : "'" + key + "': ") + msg;
    return false;
  }

  /// The valid key closest to `key` (edit distance).
  static std::string nearest(llvm::StringRef key,
                             const std::vector<std::string> &valid) {
    std::string best;
    unsigned bestDist = ~0u;
    for (const std::string &v : valid) {
      unsigned d = key.edit_distance(v, true, 8);
      if (d < bestDist) {
        bestDist = d;
        best = v;
      }
    }
    return best;
  }

  /// Every key of `obj` must be in `valid` (or a known unsupported one).
  bool checkKeys(const Object &obj, const std::string &where,
                 const std::vector<std::string> &valid,
                 const std::map<std::string, std::string> &known = {}) {
    for (const auto &kv : obj) {
      std::string key = kv.first.str();
      if (std::find(valid.begin(), valid.end(), key) != valid.end())
        continue;
      std::string path = where.empty() ? key : where + "." + key;
      if (auto it = known.find(key); it != known.end())
        return fail(path, "is a DeepSpeed key ds does not support yet (" +
                              it->second + ")");
      return fail(path, "unknown key; did you mean '" +
                            (where.empty() ? "" : where + ".") +
                            nearest(key, valid) + "'?");
    }
    return true;
  }

  std::optional<double> number(const Value &v, const std::string &key) {
    if (auto d = v.getAsNumber())
      return *d;
    if (auto s = v.getAsString()) { // DeepSpeed accepts "5e8" strings too
      double d;
      if (!llvm::StringRef(*s).getAsDouble(d))
        return d;
    }
    fail(key, "expects a number");
    return std::nullopt;
  }
  std::optional<int64_t> integer(const Value &v, const std::string &key) {
    std::optional<double> d = number(v, key);
    if (!d)
      return std::nullopt;
    if (*d != std::floor(*d) || *d < 0 || *d > 9e18) {
      fail(key, "expects a non-negative whole number");
      return std::nullopt;
    }
    return static_cast<int64_t>(*d);
  }
  std::optional<bool> boolean(const Value &v, const std::string &key) {
    if (auto b = v.getAsBoolean())
      return *b;
    fail(key, "expects true or false");
    return std::nullopt;
  }
  std::optional<std::string> string(const Value &v, const std::string &key) {
    if (auto s = v.getAsString())
      return s->str();
    fail(key, "expects a string");
    return std::nullopt;
  }
  const Object *object(const Value &v, const std::string &key) {
    if (const Object *o = v.getAsObject())
      return o;
    fail(key, "expects an object");
    return nullptr;
  }

  /// A key that maps plainly onto the option whose CONFIG_KEY is
  /// `configKey`: its value read as the option's type. `path` names it in
  /// messages.
  bool plain(const Value &v, llvm::StringRef configKey,
             const std::string &path) {
    const OptionInfo *info = findOptionByKey(configKey);
    if (!info)
      return fail(path, "has no option");
    std::optional<std::string> text = std::visit(
        [&](auto member) -> std::optional<std::string> {
          using T = std::decay_t<decltype(TrainingOptions().*member)>;
          if constexpr (std::is_same_v<T, double>) {
            auto d = number(v, path);
            return d ? std::optional<std::string>(fmt(*d)) : std::nullopt;
          } else if constexpr (std::is_same_v<T, bool>) {
            auto b = boolean(v, path);
            return b ? std::optional<std::string>(*b ? "true" : "false")
                     : std::nullopt;
          } else if constexpr (std::is_same_v<T, std::string>) {
            return string(v, path);
          } else {
            auto n = integer(v, path);
            return n ? std::optional<std::string>(std::to_string(*n))
                     : std::nullopt;
          }
        },
        info->field);
    if (text)
      set(info->flag.str(), *text, path);
    return text.has_value();
  }
};

/// train_batch_size, train_micro_batch_size_per_gpu,
/// gradient_accumulation_steps: the batch triad, resolved later.
bool readBatchKey(Reader &r, const std::string &key, const Value &v) {
  auto n = r.integer(v, key);
  if (!n || !((*n > 0 && *n <= (int64_t(1) << 31)) ||
              r.fail(key, "must be from 1 to 2^31")))
    return false;
  (key == "train_batch_size"                 ? r.config.trainBatch
   : key == "train_micro_batch_size_per_gpu" ? r.config.microBatch
                                             : r.config.accumSteps) = *n;
  return true;
}

bool readCommDtype(Reader &r, const std::string &key, const Value &v) {
  auto s = r.string(v, key);
  if (!s)
    return false;
  std::string t = *s;
  if (t == "fp16" || t == "half" || t == "float16")
    t = "fp16";
  else if (t == "bf16" || t == "bfloat16")
    t = "bf16";
  else if (t == "fp32" || t == "float" || t == "float32")
    t = "fp32";
  else
    return r.fail(key, "'" + *s + "' is not one of fp32, fp16, bf16");
  r.set("comm-dtype", t, key);
  return true;
}

/// optimizer.params: the hyper-parameters of optimizer type `t`; records
/// the weight decay and Adam's adam_w_mode.
bool readOptimizerParams(Reader &r, const std::string &key, const Value &pv,
                         const std::string &t, double &decay, bool &wMode) {
  std::vector<std::string> valid = {"lr", "weight_decay"};
  if (t == "sgd")
    valid.insert(valid.end(), {"momentum", "dampening", "nesterov"});
  else
    valid.insert(valid.end(), {"betas", "eps", "bias_correction"});
  if (t == "adam")
    valid.push_back("adam_w_mode");
  const Object *p = r.object(pv, key + ".params");
  if (!p || !r.checkKeys(*p, key + ".params", valid))
    return false;
  for (const auto &pkv : *p) {
    std::string pk = key + ".params." + pkv.first.str();
    llvm::StringRef name = pkv.first;
    if (name == "betas") {
      const llvm::json::Array *a = pkv.second.getAsArray();
      if (!a || a->size() != 2 || !(*a)[0].getAsNumber() ||
          !(*a)[1].getAsNumber())
        return r.fail(pk, "expects two numbers [beta1, beta2]");
      r.set("beta1", fmt(*(*a)[0].getAsNumber()), pk);
      r.set("beta2", fmt(*(*a)[1].getAsNumber()), pk);
    } else if (name == "adam_w_mode" || name == "bias_correction") {
      auto b = r.boolean(pkv.second, pk);
      if (!b)
        return false;
      if (name == "adam_w_mode")
        wMode = *b;
      else if (!*b)
        return r.fail(pk, "false is not supported yet (ds's Adam always "
                          "corrects the bias)");
    } else {
      if (!r.plain(pkv.second, ("optimizer.params." + name).str(), pk))
        return false;
      if (name == "weight_decay")
        decay = *r.number(pkv.second, pk);
    }
  }
  return true;
}

/// optimizer: its type and parameters.
bool readOptimizer(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o || !r.checkKeys(*o, key, {"type", "params"}))
    return false;
  const Value *typeV = o->get("type");
  if (!typeV)
    return r.fail(key, "needs a 'type'");
  auto type = r.string(*typeV, key + ".type");
  if (!type)
    return false;
  std::string t = llvm::StringRef(*type).lower();
  if (t != "adam" && t != "adamw" && t != "sgd" && t != "lamb")
    return r.fail(key + ".type", "'" + *type +
                                     "' is not supported yet (ds has Adam, "
                                     "AdamW, SGD and Lamb)");
  double decay = 0;
  bool wMode = true; // DeepSpeed's FusedAdam: adam_w_mode defaults on
  if (const Value *pv = o->get("params"))
    if (!readOptimizerParams(r, key, *pv, t, decay, wMode))
      return false;
  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (decay added to
  // the gradient, as torch.optim.Adam); without decay the two are the same
  // update.
  r.set("optimizer", t == "adam" && wMode && decay != 0 ? "adamw" : t,
        key + ".type");
  return true;
}

/// fp16, bf16 (bfloat16): the precision, and fp16's loss scaler.
bool readPrecision(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  std::vector<std::string> valid = {"enabled"};
  if (key == "fp16")
    valid.insert(valid.end(),
                 {"loss_scale", "initial_scale_power", "loss_scale_window",
                  "hysteresis", "consecutive_hysteresis", "min_loss_scale",
                  "auto_cast", "fp16_master_weights_and_grads"});
  else
    valid.push_back("immediate_grad_update");
  if (!o || !r.checkKeys(*o, key, valid))
    return false;
  bool enabled = false;
  if (const Value *e = o->get("enabled")) {
    auto b = r.boolean(*e, key + ".enabled");
    if (!b)
      return false;
    enabled = *b;
  }
  if (!enabled)
    return true;
  r.set("precision", key == "fp16" ? "fp16" : "bf16", key + ".enabled");
  for (const auto &fkv : *o) {
    std::string fk = key + "." + fkv.first.str();
    llvm::StringRef name = fkv.first;
    if (name == "enabled")
      continue;
    if (name == "auto_cast" || name == "fp16_master_weights_and_grads" ||
        name == "immediate_grad_update") {
      auto b = r.boolean(fkv.second, fk);
      if (!b)
        return false;
      if (*b)
        return r.fail(fk, "true is not supported yet (ds keeps f32 master "
                          "weights and casts by the op's own rules)");
      continue;
    }
    if (name == "initial_scale_power" || name == "loss_scale_window" ||
        name == "hysteresis") {
      auto d = r.number(fkv.second, fk);
      if (!d)
        return false;
      if (*d != std::floor(*d) || *d < 0 || *d > 9e18)
        return r.fail(fk, "expects a whole number from 0 to 9e18");
      r.set(findOptionByKey("fp16." + name.str())->flag.str(),
            std::to_string(static_cast<int64_t>(*d)), fk);
      continue;
    }
    if (!r.plain(fkv.second, "fp16." + name.str(), fk))
      return false;
  }
  return true;
}

/// zero_optimization.offload_optimizer / offload_param: {"device": "none"|
/// "cpu"|"nvme", "nvme_path": ..., and DeepSpeed's buffer knobs, which a
/// static plan does not need}.
bool readOffload(Reader &r, const std::string &zk, llvm::StringRef name,
                 const Value &v) {
  const Object *so = r.object(v, zk);
  std::vector<std::string> keys = {"device", "nvme_path", "pin_memory",
                                   "buffer_count", "fast_init"};
  if (name == "offload_param")
    keys.insert(keys.end(), {"buffer_size", "max_in_cpu"});
  else
    keys.push_back("ratio");
  if (!so || !r.checkKeys(*so, zk, keys))
    return false;
  const Value *dv = so->get("device");
  auto device =
      dv ? r.string(*dv, zk + ".device") : std::optional<std::string>("none");
  if (!device)
    return false;
  std::string spec = *device;
  if (*device == "nvme") {
    const Value *pv = so->get("nvme_path");
    auto path =
        pv ? r.string(*pv, zk + ".nvme_path") : std::optional<std::string>();
    if (!path)
      return pv ? false : r.fail(zk, "device nvme needs \"nvme_path\"");
    spec = "nvme:" + *path;
  } else if (*device != "none" && *device != "cpu") {
    return r.fail(zk + ".device", "must be \"none\", \"cpu\" or \"nvme\"");
  }
  if (const Value *ratio = so->get("ratio");
      ratio && ratio->getAsNumber() && *ratio->getAsNumber() != 1.0)
    return r.fail(zk + ".ratio", "partial offload is not supported (ds "
                                 "offloads all of the state or none)");
  r.set(findOptionByKey(zk)->flag.str(), spec, zk);
  return true;
}

/// zero_optimization: the stage, the buckets, overlap and offload.
bool readZero(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  std::map<std::string, std::string> known = {
      {"stage3_max_live_parameters", "ds plans stage-3 memory statically"},
      {"stage3_max_reuse_distance", "ds plans stage-3 memory statically"},
      {"sub_group_size", "ds updates each tensor separately"},
      {"round_robin_gradients", "not available"},
      {"zero_hpz_partition_size", "not available"},
      {"zero_quantized_weights", "not available"},
      {"zero_quantized_gradients", "not available"},
      {"mics_shard_size", "not available"},
      {"stage3_gather_16bit_weights_on_model_save", "use ds-run --consolidate"},
      {"elastic_checkpoint", "checkpoints re-partition anyway"},
      {"ignore_unused_parameters", "not needed"},
      {"load_from_fp32_weights", "checkpoints keep the masters"},
      {"cpu_offload", "use offload_optimizer: {\"device\": \"cpu\"}"}};
  std::vector<std::string> valid = {"stage",
                                    "contiguous_gradients",
                                    "reduce_scatter",
                                    "reduce_bucket_size",
                                    "allgather_partitions",
                                    "allgather_bucket_size",
                                    "overlap_comm",
                                    "stage3_prefetch_bucket_size",
                                    "stage3_param_persistence_threshold",
                                    "offload_optimizer",
                                    "offload_param"};
  if (!o || !r.checkKeys(*o, key, valid, known))
    return false;
  for (const auto &zkv : *o) {
    std::string zk = key + "." + zkv.first.str();
    llvm::StringRef name = zkv.first;
    if (name == "offload_optimizer" || name == "offload_param") {
      if (!readOffload(r, zk, name, zkv.second))
        return false;
    } else if (name == "contiguous_gradients" || name == "reduce_scatter" ||
               name == "allgather_partitions") {
      auto b = r.boolean(zkv.second, zk);
      if (!b)
        return false;
      if (!*b)
        return r.fail(zk, "false is not supported yet (ds always " +
                              std::string(name == "contiguous_gradients"
                                              ? "plans gradients in the arena"
                                          : name == "reduce_scatter"
                                              ? "reduce-scatters gradients"
                                              : "all-gathers partitions") +
                              ")");
    } else if (name == "stage") {
      auto n = r.integer(zkv.second, zk);
      if (!n)
        return false;
      if (*n > 3)
        return r.fail(zk, "must be 0, 1, 2 or 3");
      r.set("zero", std::to_string(*n), zk);
    } else if (!r.plain(zkv.second, zk, zk)) {
      return false;
    }
  }
  return true;
}

/// activation_checkpointing: only its off values (ds chooses what to
/// recompute itself).
bool readCheckpointing(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  std::vector<std::string> valid = {
      "partition_activations",           "cpu_checkpointing",
      "contiguous_memory_optimization",  "number_checkpoints",
      "synchronize_checkpoint_boundary", "profile"};
  if (!o || !r.checkKeys(*o, key, valid))
    return false;
  for (const auto &akv : *o) {
    bool off = akv.second.getAsNull().has_value() ||
               (akv.second.getAsBoolean() && !*akv.second.getAsBoolean());
    if (!off)
      return r.fail(key + "." + akv.first.str(),
                    "is not supported (ds chooses what to recompute itself: "
                    "give \"ds\": {\"recompute\": \"auto\", "
                    "\"device_memory\": \"80GiB\"} or --recompute)");
  }
  return true;
}

/// tensor_parallel (DeepSpeed's AutoTP: the group size; ds finds the MLP
/// blocks itself) and pipeline (the stage count; its schedule is 1F1B,
/// ds's default; the micro-batches are the accumulation steps; ds cuts and
/// balances the stages itself, so the partition method and the
/// partitioned hand-overs have no counterpart).
bool readParallelism(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  std::vector<std::string> valid = {"autotp_size"};
  if (key == "pipeline")
    valid = {"stages",           "partition",
             "seed_layers",      "pipe_partitioned",
             "grad_partitioned", "activation_checkpoint_interval"};
  if (!o || !r.checkKeys(*o, key, valid))
    return false;
  for (llvm::StringRef name : {"autotp_size", "stages"})
    if (const Value *n = o->get(name))
      if (!r.plain(*n, key + "." + name.str(), key + "." + name.str()))
        return false;
  if (const Value *interval = o->get("activation_checkpoint_interval")) {
    std::string ik = key + ".activation_checkpoint_interval";
    auto n = r.integer(*interval, ik);
    if (n && *n != 0)
      return r.fail(ik, "is not supported (ds chooses what to recompute "
                        "itself: give \"ds\": {\"recompute\": \"auto\"} or "
                        "--recompute)");
    return n.has_value();
  }
  return true;
}

/// aio: DeepSpeed's async I/O. Block size, queue depth and thread count
/// shape ds's requests; its submission knobs have no counterpart, so they
/// are accepted and have no effect.
bool readAio(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o || !r.checkKeys(*o, key,
                         {"block_size", "queue_depth", "thread_count",
                          "single_submit", "overlap_events", "use_gds"}))
    return false;
  for (const auto &akv : *o) {
    std::string ak = key + "." + akv.first.str();
    if (akv.first == "block_size") { // a size option, given in bytes
      auto n = r.integer(akv.second, ak);
      if (!n)
        return false;
      r.set("aio-block-size", std::to_string(*n), ak);
    } else if (findOptionByKey(ak) && !r.plain(akv.second, ak, ak)) {
      return false;
    }
  }
  return true;
}

/// ds: ds's own keys, what DeepSpeed leaves to the user's code.
bool readDsExtensions(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o || !r.checkKeys(
                *o, key,
                {"recompute", "device_memory", "offload", "sequence_parallel",
                 "sync_batchnorm"}))
    return false;
  for (const auto &dkv : *o) {
    std::string dk = key + "." + dkv.first.str();
    if (dkv.first != "device_memory") {
      if (!r.plain(dkv.second, dk, dk))
        return false;
      continue;
    }
    std::optional<std::string> s;
    if (auto d = dkv.second.getAsNumber()) {
      if (!(*d >= 0 && *d < 9e18))
        return r.fail(dk, "expects a size in bytes (0 to 9e18) or a string "
                          "such as \"80GiB\"");
      s = std::to_string(static_cast<int64_t>(*d));
    } else {
      s = r.string(dkv.second, dk);
    }
    if (!s)
      return false;
    r.set("device-memory", *s, dk);
  }
  return true;
}

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
  return true;
}

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

llvm::Error mlir::ds::readDeepSpeedConfig(llvm::StringRef path,
                                          DeepSpeedConfig &config) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return fail("cannot read the config '" + path +
                "': " + buffer.getError().message());
  llvm::Expected<Value> parsed = llvm::json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail(path +
                " is not valid JSON: " + llvm::toString(parsed.takeError()));
  const Object *top = parsed->getAsObject();
  if (!top)
    return fail(path + ": the config must be a JSON object");
  Reader r{path.str(), "", config};
  bool ok = r.checkKeys(*top, "", topKeys, unsupported());
  for (const auto &kv : *top)
    if (!(ok = ok && readTopKey(r, kv.first.str(), kv.second)))
      break;
  // fp16 and bf16 both enabled: a conflict.
  int precisions = 0;
  for (const ConfigSetting &s : config.settings)
    precisions += s.flag == "precision";
  if (ok && precisions > 1)
    ok = r.fail("", "fp16 and bf16 are both enabled; enable one");
  return ok ? llvm::Error::success() : fail(r.err);
}

llvm::Error mlir::ds::applyDeepSpeedConfig(llvm::StringRef path,
                                           TrainingOptions &options) {
  DeepSpeedConfig dsc;
  if (llvm::Error e = readDeepSpeedConfig(path, dsc))
    return e;
  for (const ConfigSetting &set : dsc.settings) {
    const OptionInfo *info = findOption(set.flag);
    if (!info)
      return fail(path + ": '" + set.key + "' maps to --" + set.flag +
                  ", which this ds-opt lacks");
    if (options.origin.lookup(set.flag) == "command line")
      continue; // the command line wins
    if (llvm::Error e = setOption(options, *info, set.value)) {
      llvm::consumeError(std::move(e));
      return fail(path + ": '" + set.key + "' = " + set.value +
                  " is not a valid --" + set.flag);
    }
    options.origin[set.flag] = "config: " + set.key;
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

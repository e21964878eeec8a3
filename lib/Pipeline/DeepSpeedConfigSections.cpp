//===- DeepSpeedConfigSections.cpp - the sections of a ds_config.json ----===//
//
// Part of the ds project.
//
// One reader per section of the config: the batch triad, the optimizer,
// fp16/bf16, zero_optimization and its offload, activation checkpointing,
// tensor and pipeline parallelism, aio, and ds's own keys. Each records
// every problem it finds in the Reader and goes on where it can.
//
//===----------------------------------------------------------------------===//

#include "ConfigReader.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::config;


/// train_batch_size, train_micro_batch_size_per_gpu,
/// gradient_accumulation_steps: the batch triad, resolved later.
bool config::readBatchKey(Reader &r, const std::string &key, const Value &v) {
  if (isAuto(v)) { // as HF's Trainer fills it: from what is determined
    r.autoValue(key, key == "train_micro_batch_size_per_gpu"
                         ? "the model's batch"
                     : key == "train_batch_size"
                         ? "micro-batch x accumulation x ranks"
                         : "from train_batch_size, else 1");
    return true;
  }
  auto n = r.integer(v, key);
  if (!n || !((*n > 0 && *n <= (int64_t(1) << 31)) ||
              r.fail(key, "must be from 1 to 2^31")))
    return false;
  (key == "train_batch_size"                 ? r.config.trainBatch
   : key == "train_micro_batch_size_per_gpu" ? r.config.microBatch
                                             : r.config.accumSteps) = *n;
  return true;
}

bool config::readCommDtype(Reader &r, const std::string &key, const Value &v) {
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

/// The keys of DeepSpeed's compressed optimizers (its class `dsName`, ds's
/// `label`) that ds accepts without effect, and AMSGrad, which it refuses.
static void compressedOptimizerKeys(std::map<std::string, KnownKey> &known,
                                    const std::string &label,
                                    const std::string &dsName,
                                    bool epsInsideSqrt) {
  known["cuda_aware"] = {KnownKey::NoOp, "ds exchanges through its own "
                                         "communicator"};
  known["comm_backend_name"] = {KnownKey::NoOp,
                                "ds runs the exchange with MPI (CPU)"};
  known["bias_correction"] = {KnownKey::NoOp,
                              label + " never corrects bias"};
  known["max_grad_norm"] = {KnownKey::NoOp,
                            "DeepSpeed's " + dsName + " does not read it"};
  if (epsInsideSqrt)
    known["eps_inside_sqrt"] = {KnownKey::NoOp,
                                "DeepSpeed's " + dsName + " never reads it "
                                "(eps is added outside the square root)"};
  known["amsgrad"] = {KnownKey::OffOnly, label + " has no AMSGrad"};
}

/// optimizer.params: the hyper-parameters of optimizer type `t`; records
/// the weight decay and Adam's adam_w_mode.
static bool readOptimizerParams(Reader &r, const std::string &key, const Value &pv,
                         const std::string &t, double &decay, bool &wMode) {
  std::vector<std::string> valid = {"lr", "weight_decay"};
  // torch_adam picks torch's implementation over DeepSpeed's fused one:
  // the same update.
  std::map<std::string, KnownKey> known = {
      {"torch_adam", {KnownKey::NoOp, "ds runs its own Adam"}},
      {"fused", {KnownKey::NoOp, "ds runs its own kernels"}}};
  if (t == "sgd")
    valid.insert(valid.end(), {"momentum", "dampening", "nesterov"});
  else if (t == "onebitadam") { // DeepSpeed's OnebitAdam arguments
    valid.insert(valid.end(), {"betas", "eps", "freeze_step"});
    compressedOptimizerKeys(known, "1-bit Adam", "OnebitAdam", false);
  } else if (t == "zerooneadam") { // DeepSpeed's ZeroOneAdam arguments
    valid.insert(valid.end(), {"betas", "eps", "var_freeze_step",
                               "var_update_scaler", "local_step_scaler",
                               "local_step_clipper"});
    compressedOptimizerKeys(known, "0/1 Adam", "ZeroOneAdam", true);
  } else if (t == "onebitlamb") { // DeepSpeed's OnebitLamb arguments
    valid.insert(valid.end(), {"betas", "eps", "freeze_step", "max_coeff",
                               "min_coeff", "coeff_beta", "factor_max",
                               "factor_min", "factor_threshold"});
    compressedOptimizerKeys(known, "1-bit LAMB", "OnebitLamb", true);
  } else
    valid.insert(valid.end(), {"betas", "eps", "bias_correction"});
  if (t == "adam" || t == "adamw") // AdamW is always in W mode
    valid.push_back("adam_w_mode");
  if (t == "lamb")
    valid.insert(valid.end(), {"max_coeff", "min_coeff"});
  const Object *p = r.object(pv, key + ".params");
  if (!p || !r.checkKeys(*p, key + ".params", valid, known))
    return false;
  for (const auto &pkv : *p) {
    std::string pk = key + ".params." + pkv.first.str();
    llvm::StringRef name = pkv.first;
    if (known.count(name.str()))
      continue;
    if (name == "freeze_step") { // an integer, or "auto": ds-run decides
      std::optional<int64_t> n;
      if (!isAuto(pkv.second) && !(n = r.integer(pkv.second, pk)))
        return false;
      r.set("freeze-step", n ? std::to_string(*n) : "auto", pk);
      continue;
    }
    if (isAuto(pkv.second) && name != "lr" && name != "weight_decay" &&
        name != "eps") {
      r.autoValue(pk, name == "betas" ? "--beta1/--beta2 (command line, "
                                        "else 0.9/0.999)"
                                      : "its default");
      continue;
    }
    if (name == "betas") {
      const llvm::json::Array *a = pkv.second.getAsArray();
      if (!a || a->size() != 2 || !(*a)[0].getAsNumber() ||
          !(*a)[1].getAsNumber())
        return r.fail(pk, "expects two numbers [beta1, beta2]");
      r.set("beta1", fmt(*(*a)[0].getAsNumber()), pk);
      r.set("beta2", fmt(*(*a)[1].getAsNumber()), pk);
    } else if (name == "adam_w_mode") {
      auto b = r.boolean(pkv.second, pk);
      if (!b)
        return false;
      wMode = *b;
    } else {
      if (!r.plain(pkv.second, ("optimizer.params." + name).str(), pk))
        return false;
      if (name == "weight_decay") // "auto": unknown, so not zero
        decay = isAuto(pkv.second) ? NAN : *r.number(pkv.second, pk);
    }
  }
  return true;
}

/// optimizer: its type and parameters.
bool config::readOptimizer(Reader &r, const std::string &key, const Value &v) {
  const Object *o = nullptr;
  std::optional<std::string> type = r.typedSection(v, key, o);
  if (!type)
    return false;
  // DeepSpeed matches type names without case (OneBitAdam = onebitadam).
  std::string t = llvm::StringRef(*type).lower();
  if (t == "fusedadam" || t == "cpuadam" || t == "deepspeedcpuadam")
    t = "adam"; // DeepSpeed's implementations of Adam, as "Adam" picks
  if (t != "adam" && t != "adamw" && t != "sgd" && t != "lamb" &&
      t != "onebitadam" && t != "zerooneadam" && t != "onebitlamb")
    return r.fail(key + ".type",
                  "'" + *type + "' is not supported yet (ds has Adam, AdamW, "
                  "SGD, Lamb, OneBitAdam, ZeroOneAdam and OneBitLamb" +
                  ")");
  double decay = 0;
  bool wMode = true; // DeepSpeed's FusedAdam: adam_w_mode defaults on
  if (const Value *pv = o->get("params"))
    if (!readOptimizerParams(r, key, *pv, t, decay, wMode))
      return false;
  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (decay added to
  // the gradient, as torch.optim.Adam); without decay the two are the same
  // update.
  if (t == "onebitadam" || t == "zerooneadam" ||
      t == "onebitlamb") { // AdamW's weight decay
    r.set("optimizer",
          t == "onebitadam"    ? "onebit-adam"
          : t == "zerooneadam" ? "zero-one-adam"
                               : "onebit-lamb",
          key + ".type");
    return true;
  }
  r.set("optimizer", t == "adam" && wMode && decay != 0 ? "adamw" : t,
        key + ".type");
  return true;
}

/// fp16, bf16 (bfloat16): the precision, and fp16's loss scaler.
bool config::readPrecision(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  std::vector<std::string> valid = {"enabled"};
  if (key == "fp16")
    valid.insert(valid.end(),
                 {"loss_scale", "initial_scale_power", "loss_scale_window",
                  "hysteresis", "consecutive_hysteresis", "min_loss_scale",
                  "auto_cast", "fp16_master_weights_and_grads"});
  else
    valid.insert(valid.end(),
                 {"immediate_grad_update", "loss_scale", "initial_scale_power",
                  "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                  "min_loss_scale"});
  if (!o || !r.checkKeys(*o, key, valid))
    return false;
  bool enabled = false, autoEnabled = false;
  if (const Value *e = o->get("enabled"); e && isAuto(*e)) {
    // HF's Trainer fills it from its own flag: here, the command line's;
    // the loss scaler's keys are read for when that is fp16.
    r.autoValue(key + ".enabled", "--precision (command line, else fp32)");
    autoEnabled = true;
  } else if (e) {
    auto b = r.boolean(*e, key + ".enabled");
    if (!b)
      return false;
    enabled = *b;
  }
  if (!enabled && !autoEnabled)
    return true;
  if (enabled)
    r.set("precision", key == "fp16" ? "fp16" : "bf16", key + ".enabled");
  for (const auto &fkv : *o) {
    std::string fk = key + "." + fkv.first.str();
    llvm::StringRef name = fkv.first;
    if (name == "enabled")
      continue;
    if (key != "fp16" && name != "immediate_grad_update") {
      // fp16's loss-scaler keys, often copied into bf16 sections: DeepSpeed
      // does not read them there either.
      r.note(fk, "accepted without effect: bf16 trains without loss "
                 "scaling");
      continue;
    }
    if (name == "auto_cast") { // --fp16-auto-cast: inputs rounded to fp16
      if (!r.plain(fkv.second, "fp16.auto_cast", fk))
        return false;
      continue;
    }
    if (name == "fp16_master_weights_and_grads" ||
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
static bool readOffload(Reader &r, const std::string &zk, llvm::StringRef name,
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

/// DeepSpeed offloads parameters at ZeRO-3 only and ignores offload_param
/// below it (configs shared across stages set it): the setting is dropped
/// with a notice instead of failing the compile. --offload-param given
/// with --zero below 3 on the command line stays an error.
static void dropParamOffloadBelowStage3(Reader &r, const std::string &key,
                                        const Object &o) {
  const Value *stage = o.get("stage");
  std::optional<double> n =
      stage ? stage->getAsNumber() : std::optional<double>(0);
  if (!n || *n >= 3)
    return;
  auto &settings = r.config.settings;
  auto it = std::find_if(settings.begin(), settings.end(), [](const auto &s) {
    return s.flag == "offload-param";
  });
  if (it == settings.end() || it->value == "none")
    return;
  r.note(key + ".offload_param",
         "accepted without effect at stage " +
             std::to_string(static_cast<int>(*n)) +
             ": DeepSpeed offloads parameters at ZeRO-3 only");
  settings.erase(it);
}

/// zero_optimization: the stage, the buckets, overlap and offload.
bool config::readZero(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  using K = KnownKey;
  static const std::map<std::string, KnownKey> known = {
      {"stage3_max_reuse_distance",
       {K::NoOp, "ds releases each gathered parameter after its last use "
                 "in a pass and gathers it again for the backward pass; "
                 "nothing is kept for reuse (the plan's peak counts every "
                 "gathered parameter)"}},
      {"sub_group_size", {K::NoOp, "ds updates each tensor separately"}},
      {"round_robin_gradients",
       {K::NoOp, "it orders DeepSpeed's offload copies; ds plans its own"}},
      {"zero_quantized_nontrainable_weights",
       {K::OffOnly, "ds quantizes the gathers of trainable parameters only "
                    "(ZeRO++'s qwZ, zero_quantized_weights)"}},
      {"elastic_checkpoint", {K::NoOp, "checkpoints re-partition anyway"}},
      {"ignore_unused_parameters", {K::NoOp, "the graph has no unused ones"}},
      {"load_from_fp32_weights", {K::NoOp, "checkpoints keep the masters"}},
      {"memory_efficient_linear", {K::NoOp, "ds plans the linear layers' "
                                            "memory itself"}},
      {"use_multi_rank_bucket_allreduce", {K::NoOp, "ds plans its buckets"}},
      {"cpu_offload_use_pin_memory",
       {K::NoOp, "the plan sizes every host buffer"}},
      {"legacy_stage1", {K::OffOnly, "not available"}},
      {"stage3_module_granularity_threshold",
       {K::NoOp, "ds gathers per tensor"}},
      {"log_trace_cache_warnings", {K::NoOp, "ds has no trace cache"}}};
  std::vector<std::string> valid = {"stage",
                                    "contiguous_gradients",
                                    "reduce_scatter",
                                    "reduce_bucket_size",
                                    "allgather_partitions",
                                    "allgather_bucket_size",
                                    "overlap_comm",
                                    "stage3_prefetch_bucket_size",
                                    "stage3_param_persistence_threshold",
                                    "stage3_max_live_parameters",
                                    "stage3_gather_16bit_weights_on_model_save",
                                    "stage3_gather_fp16_weights_on_model_save",
                                    "offload_optimizer",
                                    "offload_param",
                                    "cpu_offload",
                                    "cpu_offload_params",
                                    "zero_hpz_partition_size",
                                    "zero_quantized_weights",
                                    "zero_quantized_gradients",
                                    "mics_shard_size"};
  if (!o || !r.checkKeys(*o, key, valid, known))
    return false;
  for (const auto &zkv : *o) {
    std::string zk = key + "." + zkv.first.str();
    llvm::StringRef name = zkv.first;
    if (known.count(name.str()))
      continue;
    if (name == "cpu_offload" || name == "cpu_offload_params") {
      // DeepSpeed's old spellings of offload_optimizer/offload_param.
      auto b = r.boolean(zkv.second, zk);
      if (!b)
        return false;
      std::string now = name == "cpu_offload" ? "offload_optimizer"
                                              : "offload_param";
      r.note(zk, "deprecated (DeepSpeed too); read as " + key + "." + now +
                     ": {\"device\": \"" + (*b ? "cpu" : "none") + "\"}");
      if (*b)
        r.set(name == "cpu_offload" ? "offload-optimizer" : "offload-param",
              "cpu", zk);
    } else if (name == "mics_shard_size") {
      // Its off values: -1 (or 0).
      auto d = r.number(zkv.second, zk);
      if (d && *d > 1)
        return r.fail(zk, "is not supported yet (MiCS is not built)");
      if (!d)
        return false;
    } else if (name == "offload_optimizer" || name == "offload_param") {
      if (!readOffload(r, zk, name, zkv.second))
        return false;
    } else if (name == "contiguous_gradients" || name == "reduce_scatter" ||
               name == "allgather_partitions") {
      // DeepSpeed's choices of buffer layout and collective: the values
      // trained are the same either way.
      auto b = r.boolean(zkv.second, zk);
      if (!b)
        return false;
      if (!*b)
        r.note(zk, "false accepted without effect: " +
                       std::string(name == "contiguous_gradients"
                                       ? "ds plans every gradient in its "
                                         "arena either way"
                                   : name == "reduce_scatter"
                                       ? "ds reduce-scatters the gradients; "
                                         "the mean is the same as "
                                         "DeepSpeed's all-reduce"
                                       : "ds all-gathers the partitions; "
                                         "the values are those DeepSpeed's "
                                         "broadcasts give"));
    } else if (name.starts_with("stage3_gather_") && isAuto(zkv.second)) {
      r.autoValue(zk, "false (accelerate's default: under ZeRO-3 "
                      "save_16bit_model writes nothing)");
    } else if (name.starts_with("stage3_gather_")) {
      // Read at save time by the Python engine (save_16bit_model,
      // save_checkpoint); the plan is the same either way.
      auto b = r.boolean(zkv.second, zk);
      if (!b)
        return false;
      if (*b)
        r.note(zk, "honoured by ds.initialize's engine (save_16bit_model "
                   "and save_checkpoint write the gathered 16-bit weights); "
                   "the plan does not change, and ds-run writes whole "
                   "weights with --consolidate DIR");
    } else if (name == "stage3_max_live_parameters" && isAuto(zkv.second)) {
      r.autoValue(zk, "no cap (the prefetch bucket as set)");
    } else if (name == "stage3_max_live_parameters") {
      auto n = r.integer(zkv.second, zk); // refuses negative numbers
      if (!n)
        return false;
      r.config.maxLiveParameters = *n;
    } else if ((name == "zero_quantized_weights" ||
                name == "zero_quantized_gradients") &&
               isAuto(zkv.second)) {
      r.autoValue(zk, "--plan=auto's choice (docs/planner.md, \"Compressed "
                      "communication\"), else false");
    } else if (name == "stage" && isAuto(zkv.second)) {
      r.autoValue(zk, "--zero (command line, else --plan=auto's choice, "
                      "else its default 0)");
    } else if (name == "stage") {
      auto n = r.integer(zkv.second, zk);
      if (!n)
        return false;
      if (*n > 3)
        return r.fail(zk, "must be 0, 1, 2 or 3");
      r.set("zero", std::to_string(*n), zk);
    } else if ((name == "reduce_bucket_size" ||
                name == "allgather_bucket_size" ||
                name == "stage3_prefetch_bucket_size") &&
               zkv.second.getAsNumber() && *zkv.second.getAsNumber() == 0) {
      // DeepSpeed flushes a bucket when the next tensor would overflow
      // it: a size of 0 puts each tensor in its own, as 1 element does.
      r.set(findOptionByKey(zk)->flag.str(), "1", zk);
    } else if (!r.plain(zkv.second, zk, zk)) {
      return false;
    }
  }
  dropParamOffloadBelowStage3(r, key, *o);
  return true;
}

/// activation_checkpointing. DeepSpeed's checkpointing acts only where the
/// model calls deepspeed.checkpointing.checkpoint (around each layer, as
/// HF's gradient_checkpointing_enable() does); an export has no such
/// calls, so the section means what those calls would do: keep each
/// layer's input and recompute its forward in the backward pass
/// (--recompute=every-layer). ds.recompute or --recompute, when given, wins
/// (ds.recompute is read after this section). The keys that shape
/// DeepSpeed's own buffers have no counterpart: each that is not at its
/// harmless value gets a notice saying so.
bool config::readCheckpointing(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  static const std::map<std::string, std::string> without = {
      {"partition_activations",
       "ds keeps each saved layer input whole on every tensor-parallel rank "
       "(ds.sequence_parallel / --sequence-parallel splits activations over "
       "the group)"},
      {"cpu_checkpointing", ""}, // --offload-activations=cpu, below
      {"contiguous_memory_optimization",
       "ds's arena already gives every saved activation a planned offset"},
      {"number_checkpoints",
       "ds keeps the input of every layer it finds (--report lists them)"},
      {"synchronize_checkpoint_boundary",
       "ds's step runs in its planned order; there is no device "
       "synchronization to add"},
      {"profile", "DeepSpeed's checkpoint timers have no counterpart "
                  "(wall_clock_breakdown times forward and backward)"}};
  std::vector<std::string> valid;
  for (const auto &kv : without)
    valid.push_back(kv.first);
  if (!o || !r.checkKeys(*o, key, valid))
    return false;
  bool ok = true;
  for (const auto &akv : *o) {
    std::string ak = key + "." + akv.first.str();
    if (akv.second.getAsNull())
      continue;
    bool on = false;
    if (akv.first == "number_checkpoints") {
      auto n = r.integer(akv.second, ak); // refuses negative numbers
      if (!n) {
        ok = false;
        continue;
      }
      on = *n > 0;
    } else {
      auto b = r.boolean(akv.second, ak);
      if (!b) {
        ok = false;
        continue;
      }
      on = *b;
    }
    if (on && akv.first == "cpu_checkpointing") {
      // DeepSpeed copies the checkpointed layer inputs to the CPU; ds
      // offloads every saved activation of at least
      // --offload-activations-min-bytes, which under every-layer recompute
      // are the layer inputs and the few tensors kept beside them.
      r.set("offload-activations", "cpu", ak);
      r.note(ak, "--offload-activations=cpu: the saved activations of at "
                 "least --offload-activations-min-bytes (the layer inputs "
                 "under every-layer recompute) wait on the host, fetched "
                 "one reader ahead of the backward pass");
    } else if (on) {
      r.note(ak, "accepted without effect: " +
                     without.at(akv.first.str()));
    }
  }
  if (!ok)
    return false;
  r.set("recompute", "every-layer", key);
  r.note(key, "the export has no deepspeed.checkpointing.checkpoint calls; "
              "the section checkpoints every layer as those calls would: "
              "--recompute=every-layer (layer inputs kept, each layer's "
              "forward recomputed in the backward; ds.recompute or "
              "--recompute given wins)");
  return true;
}

/// tensor_parallel (DeepSpeed's AutoTP: the group size; ds finds the MLP
/// blocks itself) and pipeline (the stage count; its schedule is 1F1B,
/// ds's default; the micro-batches are the accumulation steps; ds cuts and
/// balances the stages itself, so the partition method and the
/// partitioned hand-overs have no counterpart).
bool config::readParallelism(Reader &r, const std::string &key, const Value &v) {
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
bool config::readAio(Reader &r, const std::string &key, const Value &v) {
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
bool config::readDsExtensions(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o || !r.checkKeys(
                *o, key,
                {"recompute", "device_memory", "offload", "sequence_parallel",
                 "sync_batchnorm", "freeze", "trainable"}))
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


//===- DeepSpeedConfig.cpp - ds_config.json to ds-opt options -------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedConfig.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace dsconfig {
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
      {"zero_force_ds_cpu_optimizer", "offload always runs ds's host optimizer"},
      {"sequence_parallel_size", "not available"},
  };
  return m;
}

/// Keys of each section, for nearest-key suggestions.
const std::vector<std::string> topKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps", "optimizer", "fp16", "bf16", "bfloat16",
    "gradient_clipping", "communication_data_type", "zero_optimization",
    "activation_checkpointing", "aio", "tensor_parallel", "pipeline", "ds"};

struct Reader {
  std::string file, err;

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
};

std::string fmt(double v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.17g", v);
  return s;
}

} // namespace

bool readDeepSpeedConfig(llvm::StringRef path, DeepSpeedConfig &config,
                         std::string &err) {
  Reader r;
  r.file = path.str();
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    err = "cannot read the config '" + path.str() + "': " +
          buffer.getError().message();
    return false;
  }
  llvm::Expected<Value> parsed = llvm::json::parse((*buffer)->getBuffer());
  if (!parsed) {
    err = path.str() + " is not valid JSON: " + llvm::toString(parsed.takeError());
    return false;
  }
  const Object *top = parsed->getAsObject();
  if (!top) {
    err = path.str() + ": the config must be a JSON object";
    return false;
  }
  auto set = [&](const std::string &flag, const std::string &value,
                 const std::string &key) {
    config.settings.push_back({flag, value, key});
  };
  bool ok = r.checkKeys(*top, "", topKeys, unsupported());

  for (const auto &kv : *top) {
    if (!ok)
      break;
    std::string key = kv.first.str();
    const Value &v = kv.second;
    if (key == "train_batch_size") {
      auto n = r.integer(v, key);
      ok = n && ((*n > 0 && *n <= (int64_t(1) << 31)) ||
                 r.fail(key, "must be from 1 to 2^31"));
      if (ok)
        config.trainBatch = *n;
    } else if (key == "train_micro_batch_size_per_gpu") {
      auto n = r.integer(v, key);
      ok = n && ((*n > 0 && *n <= (int64_t(1) << 31)) ||
                 r.fail(key, "must be from 1 to 2^31"));
      if (ok)
        config.microBatch = *n;
    } else if (key == "gradient_accumulation_steps") {
      auto n = r.integer(v, key);
      ok = n && ((*n > 0 && *n <= (int64_t(1) << 31)) ||
                 r.fail(key, "must be from 1 to 2^31"));
      if (ok)
        config.accumSteps = *n;
    } else if (key == "gradient_clipping") {
      auto d = r.number(v, key);
      ok = d.has_value();
      if (ok)
        set("grad-clip", fmt(*d), key);
    } else if (key == "communication_data_type") {
      auto s = r.string(v, key);
      ok = s.has_value();
      if (ok) {
        std::string t = *s;
        if (t == "fp16" || t == "half" || t == "float16") t = "fp16";
        else if (t == "bf16" || t == "bfloat16") t = "bf16";
        else if (t == "fp32" || t == "float" || t == "float32") t = "fp32";
        else
          ok = r.fail(key, "'" + *s + "' is not one of fp32, fp16, bf16");
        if (ok)
          set("comm-dtype", t, key);
      }
    } else if (key == "optimizer") {
      const Object *o = r.object(v, key);
      ok = o && r.checkKeys(*o, key, {"type", "params"});
      if (!ok)
        break;
      const Value *typeV = o->get("type");
      if (!typeV) {
        ok = r.fail(key, "needs a 'type'");
        break;
      }
      auto type = r.string(*typeV, key + ".type");
      if (!(ok = type.has_value()))
        break;
      std::string t = llvm::StringRef(*type).lower();
      if (t != "adam" && t != "adamw" && t != "sgd" && t != "lamb") {
        ok = r.fail(key + ".type", "'" + *type + "' is not supported yet "
                                   "(ds has Adam, AdamW, SGD and Lamb)");
        break;
      }
      std::vector<std::string> valid = {"lr", "weight_decay"};
      if (t == "sgd")
        valid.insert(valid.end(), {"momentum", "dampening", "nesterov"});
      else
        valid.insert(valid.end(), {"betas", "eps", "bias_correction"});
      if (t == "adam")
        valid.push_back("adam_w_mode");
      double decay = 0;
      bool wMode = true; // DeepSpeed's FusedAdam: adam_w_mode defaults on
      if (const Value *pv = o->get("params")) {
        const Object *p = r.object(*pv, key + ".params");
        ok = p && r.checkKeys(*p, key + ".params", valid);
        for (const auto &pkv : (ok ? *p : Object())) {
          std::string pk = key + ".params." + pkv.first.str();
          llvm::StringRef name = pkv.first;
          if (name == "lr") {
            auto d = r.number(pkv.second, pk);
            if (!(ok = d.has_value()))
              break;
            set("lr", fmt(*d), pk);
          } else if (name == "weight_decay") {
            auto d = r.number(pkv.second, pk);
            if (!(ok = d.has_value()))
              break;
            decay = *d;
            set("weight-decay", fmt(*d), pk);
          } else if (name == "eps") {
            auto d = r.number(pkv.second, pk);
            if (!(ok = d.has_value()))
              break;
            set("eps", fmt(*d), pk);
          } else if (name == "betas") {
            const llvm::json::Array *a = pkv.second.getAsArray();
            if (!a || a->size() != 2 || !(*a)[0].getAsNumber() ||
                !(*a)[1].getAsNumber()) {
              ok = r.fail(pk, "expects two numbers [beta1, beta2]");
              break;
            }
            set("beta1", fmt(*(*a)[0].getAsNumber()), pk);
            set("beta2", fmt(*(*a)[1].getAsNumber()), pk);
          } else if (name == "momentum" || name == "dampening") {
            auto d = r.number(pkv.second, pk);
            if (!(ok = d.has_value()))
              break;
            set(name.str(), fmt(*d), pk);
          } else if (name == "nesterov") {
            auto b = r.boolean(pkv.second, pk);
            if (!(ok = b.has_value()))
              break;
            set("nesterov", *b ? "true" : "false", pk);
          } else if (name == "adam_w_mode") {
            auto b = r.boolean(pkv.second, pk);
            if (!(ok = b.has_value()))
              break;
            wMode = *b;
          } else if (name == "bias_correction") {
            auto b = r.boolean(pkv.second, pk);
            if (!(ok = b.has_value()))
              break;
            if (!*b)
              ok = r.fail(pk, "false is not supported yet (ds's Adam always "
                              "corrects the bias)");
          }
        }
      }
      if (!ok)
        break;
      // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (decay
      // added to the gradient, as torch.optim.Adam); without decay the two
      // are the same update.
      std::string opt = t;
      if (t == "adam" && wMode && decay != 0)
        opt = "adamw";
      set("optimizer", opt, key + ".type");
    } else if (key == "fp16" || key == "bf16" || key == "bfloat16") {
      const Object *o = r.object(v, key);
      std::vector<std::string> valid = {"enabled"};
      if (key == "fp16")
        valid.insert(valid.end(),
                     {"loss_scale", "initial_scale_power", "loss_scale_window",
                      "hysteresis", "consecutive_hysteresis", "min_loss_scale",
                      "auto_cast", "fp16_master_weights_and_grads"});
      else
        valid.push_back("immediate_grad_update");
      ok = o && r.checkKeys(*o, key, valid);
      if (!ok)
        break;
      bool enabled = false;
      if (const Value *e = o->get("enabled")) {
        auto b = r.boolean(*e, key + ".enabled");
        if (!(ok = b.has_value()))
          break;
        enabled = *b;
      }
      if (!enabled)
        continue;
      set("precision", key == "fp16" ? "fp16" : "bf16", key + ".enabled");
      for (const auto &fkv : *o) {
        std::string fk = key + "." + fkv.first.str();
        llvm::StringRef name = fkv.first;
        if (name == "enabled")
          continue;
        if (name == "auto_cast" || name == "fp16_master_weights_and_grads" ||
            name == "immediate_grad_update") {
          auto b = r.boolean(fkv.second, fk);
          if (!(ok = b.has_value()))
            break;
          if (*b)
            ok = r.fail(fk, "true is not supported yet (ds keeps f32 master "
                            "weights and casts by the op's own rules)");
          continue;
        }
        if (name == "consecutive_hysteresis") {
          auto b = r.boolean(fkv.second, fk);
          if (!(ok = b.has_value()))
            break;
          set("consecutive-hysteresis", *b ? "true" : "false", fk);
          continue;
        }
        auto d = r.number(fkv.second, fk);
        if (!(ok = d.has_value()))
          break;
        std::string flag = name == "loss_scale"            ? "loss-scale"
                           : name == "initial_scale_power" ? "initial-scale-power"
                           : name == "loss_scale_window"   ? "loss-scale-window"
                           : name == "hysteresis"          ? "hysteresis"
                                                           : "min-loss-scale";
        bool whole = flag == "initial-scale-power" ||
                     flag == "loss-scale-window" || flag == "hysteresis";
        if (whole && (*d != std::floor(*d) || *d < 0 || *d > 9e18)) {
          ok = r.fail(fk, "expects a whole number from 0 to 9e18");
          break;
        }
        set(flag, whole ? std::to_string(static_cast<int64_t>(*d)) : fmt(*d),
            fk);
      }
    } else if (key == "zero_optimization") {
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
          {"stage3_gather_16bit_weights_on_model_save",
           "use ds-run --consolidate"},
          {"elastic_checkpoint", "checkpoints re-partition anyway"},
          {"ignore_unused_parameters", "not needed"},
          {"load_from_fp32_weights", "checkpoints keep the masters"},
          {"cpu_offload", "use offload_optimizer: {\"device\": \"cpu\"}"}};
      std::vector<std::string> valid = {
          "stage", "contiguous_gradients", "reduce_scatter",
          "reduce_bucket_size", "allgather_partitions",
          "allgather_bucket_size", "overlap_comm",
          "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
          "offload_optimizer", "offload_param"};
      ok = o && r.checkKeys(*o, key, valid, known);
      for (const auto &zkv : (ok ? *o : Object())) {
        std::string zk = key + "." + zkv.first.str();
        llvm::StringRef name = zkv.first;
        if (name == "offload_optimizer" || name == "offload_param") {
          // {"device": "none"|"cpu"|"nvme", "nvme_path": ..., and
          // DeepSpeed's buffer knobs, which a static plan does not need}.
          const Object *so = r.object(zkv.second, zk);
          std::vector<std::string> keys = {"device", "nvme_path", "pin_memory",
                                           "buffer_count", "fast_init"};
          if (name == "offload_param")
            keys.insert(keys.end(), {"buffer_size", "max_in_cpu"});
          else
            keys.push_back("ratio");
          if (!(ok = so && r.checkKeys(*so, zk, keys)))
            break;
          const Value *dv = so->get("device");
          auto device = dv ? r.string(*dv, zk + ".device")
                           : std::optional<std::string>("none");
          if (!(ok = device.has_value()))
            break;
          std::string spec = *device;
          if (*device == "nvme") {
            const Value *pv = so->get("nvme_path");
            auto path = pv ? r.string(*pv, zk + ".nvme_path")
                           : std::optional<std::string>();
            if (!path) {
              ok = pv ? false : r.fail(zk, "device nvme needs \"nvme_path\"");
              break;
            }
            spec = "nvme:" + *path;
          } else if (*device != "none" && *device != "cpu") {
            ok = r.fail(zk + ".device", "must be \"none\", \"cpu\" or \"nvme\"");
            break;
          }
          if (const Value *ratio = so->get("ratio");
              ratio && ratio->getAsNumber() && *ratio->getAsNumber() != 1.0) {
            ok = r.fail(zk + ".ratio", "partial offload is not supported "
                                       "(ds offloads all of the state or none)");
            break;
          }
          set(name == "offload_optimizer" ? "offload-optimizer"
                                          : "offload-param",
              spec, zk);
          continue;
        }
        if (name == "contiguous_gradients" || name == "reduce_scatter" ||
            name == "allgather_partitions") {
          auto b = r.boolean(zkv.second, zk);
          if (!(ok = b.has_value()))
            break;
          if (!*b)
            ok = r.fail(zk, "false is not supported yet (ds always " +
                                std::string(name == "contiguous_gradients"
                                                ? "plans gradients in the arena"
                                            : name == "reduce_scatter"
                                                ? "reduce-scatters gradients"
                                                : "all-gathers partitions") +
                                ")");
          continue;
        }
        if (name == "overlap_comm") {
          auto b = r.boolean(zkv.second, zk);
          if (!(ok = b.has_value()))
            break;
          set("overlap-comm", *b ? "true" : "false", zk);
          continue;
        }
        auto n = r.integer(zkv.second, zk);
        if (!(ok = n.has_value()))
          break;
        std::string flag =
            name == "stage"                   ? "zero"
            : name == "reduce_bucket_size"    ? "reduce-bucket-size"
            : name == "allgather_bucket_size" ? "allgather-bucket-size"
            : name == "stage3_prefetch_bucket_size"
                ? "prefetch-bucket-size"
                : "param-persistence-threshold";
        if (flag == "zero" && *n > 3) {
          ok = r.fail(zk, "must be 0, 1, 2 or 3");
          break;
        }
        set(flag, std::to_string(*n), zk);
      }
    } else if (key == "activation_checkpointing") {
      const Object *o = r.object(v, key);
      std::vector<std::string> valid = {
          "partition_activations", "cpu_checkpointing",
          "contiguous_memory_optimization", "number_checkpoints",
          "synchronize_checkpoint_boundary", "profile"};
      ok = o && r.checkKeys(*o, key, valid);
      for (const auto &akv : (ok ? *o : Object())) {
        std::string ak = key + "." + akv.first.str();
        bool off = akv.second.getAsNull().has_value() ||
                   (akv.second.getAsBoolean() && !*akv.second.getAsBoolean());
        if (!off) {
          ok = r.fail(ak, "is not supported (ds chooses what to recompute "
                          "itself: give \"ds\": {\"recompute\": \"auto\", "
                          "\"device_memory\": \"80GiB\"} or --recompute)");
          break;
        }
      }
    } else if (key == "tensor_parallel") {
      // DeepSpeed's AutoTP: the group size; ds finds the MLP blocks itself.
      const Object *o = r.object(v, key);
      ok = o && r.checkKeys(*o, key, {"autotp_size"});
      if (ok && o->get("autotp_size")) {
        auto n = r.integer(*o->get("autotp_size"), key + ".autotp_size");
        if ((ok = n.has_value()))
          set("tensor-parallel", std::to_string(*n), key + ".autotp_size");
      }
    } else if (key == "pipeline") {
      // DeepSpeed's pipeline engine: the stage count (its schedule is
      // 1F1B, ds's default; the micro-batches are the accumulation steps).
      // ds cuts and balances the stages itself, so the partition method
      // and the partitioned hand-overs have no counterpart.
      const Object *o = r.object(v, key);
      ok = o && r.checkKeys(*o, key,
                            {"stages", "partition", "seed_layers",
                             "pipe_partitioned", "grad_partitioned",
                             "activation_checkpoint_interval"});
      if (ok && o->get("stages")) {
        auto n = r.integer(*o->get("stages"), key + ".stages");
        if ((ok = n.has_value()))
          set("pipeline-parallel", std::to_string(*n), key + ".stages");
      }
      if (ok && o->get("activation_checkpoint_interval")) {
        auto n = r.integer(*o->get("activation_checkpoint_interval"),
                           key + ".activation_checkpoint_interval");
        if (n && *n != 0)
          ok = r.fail(key + ".activation_checkpoint_interval",
                      "is not supported (ds chooses what to recompute "
                      "itself: give \"ds\": {\"recompute\": \"auto\"} or "
                      "--recompute)");
        else
          ok = n.has_value();
      }
    } else if (key == "aio") {
      // DeepSpeed's async I/O: block size, queue depth and thread count
      // shape ds's requests; its submission knobs have no counterpart, so
      // they are accepted and have no effect.
      const Object *o = r.object(v, key);
      ok = o && r.checkKeys(*o, key,
                            {"block_size", "queue_depth", "thread_count",
                             "single_submit", "overlap_events", "use_gds"});
      for (const auto &akv : (ok ? *o : Object())) {
        std::string ak = key + "." + akv.first.str();
        if (akv.first != "block_size" && akv.first != "queue_depth" &&
            akv.first != "thread_count")
          continue;
        auto n = r.integer(akv.second, ak);
        if (!(ok = n.has_value()))
          break;
        set(akv.first == "block_size"    ? "aio-block-size"
            : akv.first == "queue_depth" ? "aio-queue-depth"
                                         : "aio-threads",
            std::to_string(*n), ak);
      }
    } else if (key == "ds") {
      // ds's own keys: what DeepSpeed leaves to the user's code.
      const Object *o = r.object(v, key);
      ok = o && r.checkKeys(*o, key, {"recompute", "device_memory", "offload",
                                      "sequence_parallel"});
      for (const auto &dkv : (ok ? *o : Object())) {
        std::string dk = key + "." + dkv.first.str();
        if (dkv.first == "sequence_parallel") {
          auto b = r.boolean(dkv.second, dk);
          if (!(ok = b.has_value()))
            break;
          set("sequence-parallel", *b ? "true" : "false", dk);
        } else if (dkv.first == "recompute" || dkv.first == "offload") {
          auto s = r.string(dkv.second, dk);
          if (!(ok = s.has_value()))
            break;
          set(dkv.first.str(), *s, dk);
        } else {
          std::optional<std::string> s;
          if (auto d = dkv.second.getAsNumber()) {
            if (!(*d >= 0 && *d < 9e18)) {
              ok = r.fail(dk, "expects a size in bytes (0 to 9e18) or a string "
                              "such as \"80GiB\"");
              break;
            }
            s = std::to_string(static_cast<int64_t>(*d));
          } else {
            s = r.string(dkv.second, dk);
          }
          if (!(ok = s.has_value()))
            break;
          set("device-memory", *s, dk);
        }
      }
    }
  }
  // fp16 and bf16 both enabled: a conflict.
  int precisions = 0;
  for (const ConfigSetting &s : config.settings)
    precisions += s.flag == "precision";
  if (ok && precisions > 1)
    ok = r.fail("", "fp16 and bf16 are both enabled; enable one");
  if (!ok)
    err = r.err;
  return ok;
}

bool resolveBatch(DeepSpeedConfig &c, int64_t world, int64_t &micro,
                  int64_t &accum, std::string &err) {
  // Each size is at most 2^31 (checked when read): products of two of them
  // and the world size stay within int64 for up to 2^31 ranks.
  if (world < 1 || world > (int64_t(1) << 31)) {
    err = "the world size " + std::to_string(world) + " is out of range";
    return false;
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
      return false;
    }
    micro = *c.microBatch;
    accum = *c.accumSteps;
  } else if (c.trainBatch && c.microBatch) {
    int64_t d = *c.microBatch * world;
    if (*c.trainBatch % d) {
      err = "the batch sizes do not divide: " + text();
      return false;
    }
    micro = *c.microBatch;
    accum = *c.trainBatch / d;
  } else if (c.trainBatch && c.accumSteps) {
    int64_t d = *c.accumSteps * world;
    if (*c.trainBatch % d) {
      err = "the batch sizes do not divide: " + text();
      return false;
    }
    micro = *c.trainBatch / d;
    accum = *c.accumSteps;
  } else if (c.microBatch) {
    micro = *c.microBatch;
    accum = c.accumSteps.value_or(1);
  } else if (c.trainBatch) {
    if (*c.trainBatch % world) {
      err = "the batch sizes do not divide: " + text();
      return false;
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
    return false;
  }
  c.trainBatch = micro ? std::optional<int64_t>(total) : std::nullopt;
  return true;
}

} // namespace dsconfig

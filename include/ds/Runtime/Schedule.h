//===- Schedule.h - learning-rate schedules -------------------*- C++ -*-===//
//
// Part of the ds project. Header-only, no MLIR or LLVM: the optimizer
// kernels evaluate the schedule from the step counter at run time, and
// ds-run prints the same value.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_SCHEDULE_H
#define DS_RUNTIME_SCHEDULE_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <cctype>
#include <cstdlib>

namespace ds {

/// DeepSpeed's learning-rate schedulers (its `scheduler` config section),
/// written as a schedule spec "Type:key=value,key=value"
/// (e.g. "WarmupDecayLR:warmup_max_lr=3e-05,total_num_steps=1000"), with
/// DeepSpeed's defaults for the keys not given. Two values refer to the
/// plan: warmup_max_lr=lr is the optimizer's learning rate, and
/// warmup_num_steps=warmup / total_num_steps=total are --warmup-steps and
/// --total-steps (what "auto" becomes).
///
/// DeepSpeed steps its scheduler after each applied update, starting from
/// last_batch_iteration = -1 when it is built: update t (1 for the first)
/// runs with the scheduler's value at iteration i = t - 2, the first one
/// with its initial value.
struct DeepSpeedSchedule {
  std::string type; // WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
                    // LRRangeTest
  std::map<std::string, std::string> params;

  /// Parses `spec`; false with `err` set if it is not one.
  bool parse(const std::string &spec, std::string &err) {
    size_t colon = spec.find(':');
    type = spec.substr(0, colon);
    static const std::map<std::string, std::vector<std::string>> keys = {
        {"WarmupLR",
         {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"}},
        {"WarmupDecayLR",
         {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
          "total_num_steps"}},
        {"WarmupCosineLR",
         {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
          "cos_min_ratio", "warmup_type"}},
        {"OneCycle",
         {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate",
          "cycle_first_step_size", "cycle_second_step_size",
          "decay_step_size"}},
        {"LRRangeTest",
         {"lr_range_test_min_lr", "lr_range_test_step_size",
          "lr_range_test_step_rate", "lr_range_test_staircase"}}};
    auto it = keys.find(type);
    if (it == keys.end()) {
      err = "unknown scheduler '" + type +
            "' (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
            "LRRangeTest)";
      return false;
    }
    params.clear();
    for (size_t at = colon; at != std::string::npos && at + 1 < spec.size();) {
      size_t end = spec.find(',', at + 1);
      std::string kv = spec.substr(at + 1, end == std::string::npos
                                               ? std::string::npos
                                               : end - at - 1);
      size_t eq = kv.find('=');
      std::string k = kv.substr(0, eq);
      if (eq == std::string::npos ||
          std::find(it->second.begin(), it->second.end(), k) ==
              it->second.end()) {
        err = type + " has no parameter '" + k + "'";
        return false;
      }
      params[k] = kv.substr(eq + 1);
      at = end;
    }
    return true;
  }

  /// A number parameter; `dflt` if absent; `lr`, `warmup` and `total`
  /// stand for the plan's values.
  double num(const std::string &k, double dflt, double lr, double warmup,
             double total) const {
    auto it = params.find(k);
    if (it == params.end())
      return dflt;
    if (it->second == "lr")
      return lr;
    if (it->second == "warmup")
      return warmup;
    if (it->second == "total")
      return total;
    return std::strtod(it->second.c_str(), nullptr);
  }
  std::string str(const std::string &k, const std::string &dflt) const {
    auto it = params.find(k);
    return it == params.end() ? dflt : it->second;
  }

  /// The rate of update `t` (1-based) with base rate `lr`.
  double rate(double lr, int64_t t, double warmup, double total) const {
    double i = static_cast<double>(t) - 2.0; // last_batch_iteration
    auto get = [&](const char *k, double d) {
      return num(k, d, lr, warmup, total);
    };
    if (type == "OneCycle") {
      double lo = get("cycle_min_lr", lr), hi = get("cycle_max_lr", lr);
      double first = get("cycle_first_step_size", 2000);
      double second = get("cycle_second_step_size", first);
      double size = first + second, ratio = first / size;
      if (i < size) {
        double b = i + 1, x = 1.0 + b / size - std::floor(1.0 + b / size);
        double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
        return lo + (hi - lo) * scale;
      }
      double decayStep = get("decay_step_size", 0);
      if (decayStep == 0)
        return lo;
      return lo / (1 + get("decay_lr_rate", 0) * (i - size + 1) / decayStep);
    }
    if (type == "LRRangeTest") {
      double lo = get("lr_range_test_min_lr", 1e-3);
      if (i < 0)
        return lo;
      double n = (i + 1) / get("lr_range_test_step_size", 2000);
      if (str("lr_range_test_staircase", "false") == "true")
        n = std::floor(n);
      return lo * (1 + get("lr_range_test_step_rate", 1.0) * n);
    }
    double w = std::max(2.0, get("warmup_num_steps", 1000));
    bool linear = str("warmup_type", "log") == "linear";
    auto warm = [&]() { return linear ? i / w : std::log(i + 1) / std::log(w); };
    if (type == "WarmupCosineLR") {
      if (i < 0)
        return 0.0; // DeepSpeed sets 0 before its first step
      double minRatio = get("warmup_min_ratio", 0.0);
      if (i < w)
        return lr * (minRatio + warm() * (1 - minRatio));
      double cosMin = get("cos_min_ratio", 1e-4);
      double p = (i - w + 1) / (get("total_num_steps", total) - w);
      return lr * std::max(0.0, cosMin + (1 - cosMin) *
                                             (1 + std::cos(M_PI * p)) / 2);
    }
    double lo = get("warmup_min_lr", 0.0), hi = get("warmup_max_lr", 1e-3);
    if (i < 0)
      return lo;
    double gamma = 1.0;
    if (i < w)
      gamma = warm();
    else if (type == "WarmupDecayLR")
      gamma = std::max(0.0, (get("total_num_steps", total) - i) /
                                std::max(1.0, get("total_num_steps", total) - w));
    return lo + (hi - lo) * gamma;
  }
};

/// The learning rate of step `step` (1 for the first update):
///   constant       lr
///   warmup         lr * step / warmup for step <= warmup, then lr
///   warmup-cosine  warmup, then min + (lr - min) (1 + cos(pi p)) / 2
///   warmup-linear  warmup, then lr - (lr - min) p
/// with p = (step - warmup) / (total - warmup) clamped to [0, 1];
/// or a DeepSpeed scheduler's spec (DeepSpeedSchedule).
inline double scheduledLr(const std::string &schedule, double lr, int64_t step,
                          int64_t warmup, int64_t total, double minLr) {
  if (schedule == "constant" || schedule.empty())
    return lr;
  if (!schedule.empty() && std::isupper(static_cast<unsigned char>(schedule[0]))) {
    // Every optimizer kernel of every step asks: parse each spec once per
    // thread, not once per call.
    thread_local std::string parsedSpec;
    thread_local DeepSpeedSchedule s;
    thread_local bool ok = false;
    if (schedule != parsedSpec) {
      std::string err;
      ok = s.parse(schedule, err);
      parsedSpec = schedule;
    }
    return ok ? s.rate(lr, step, static_cast<double>(warmup),
                       static_cast<double>(total))
              : lr;
  }
  if (warmup > 0 && step <= warmup)
    return lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (schedule == "warmup")
    return lr;
  double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
  double p = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  if (schedule == "warmup-cosine")
    return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(M_PI * p));
  return lr - (lr - minLr) * p; // warmup-linear
}

/// What is wrong with schedule `s` under --warmup-steps and --total-steps;
/// "" if nothing.
inline std::string scheduleProblem(const std::string &s, int64_t warmup,
                                   int64_t total) {
  if (s == "constant" || s == "warmup")
    return "";
  if (s == "warmup-cosine" || s == "warmup-linear")
    return total > warmup ? ""
                          : "the " + s + " schedule needs --total-steps (" +
                                std::to_string(total) +
                                ") above --warmup-steps (" +
                                std::to_string(warmup) + ")";
  DeepSpeedSchedule d;
  std::string err;
  if (s.empty() || !std::isupper(static_cast<unsigned char>(s[0])))
    return "unknown learning-rate schedule '" + s +
           "' (constant, warmup, warmup-cosine, warmup-linear, or a "
           "DeepSpeed scheduler: WarmupLR:..., WarmupDecayLR:..., "
           "WarmupCosineLR:..., OneCycle:..., LRRangeTest:...)";
  if (!d.parse(s, err))
    return err;
  bool needsTotal = d.type == "WarmupDecayLR" || d.type == "WarmupCosineLR";
  double t = d.num("total_num_steps", -1, 0, static_cast<double>(warmup),
                   static_cast<double>(total));
  double w = std::max(2.0, d.num("warmup_num_steps", 1000, 0,
                                 static_cast<double>(warmup),
                                 static_cast<double>(total)));
  if (needsTotal && t <= 0)
    return d.type + " needs total_num_steps (with \"auto\": give "
                    "--total-steps N, the run's total optimizer steps)";
  if (d.type == "WarmupCosineLR" && t <= w)
    return "WarmupCosineLR needs total_num_steps above warmup_num_steps "
           "(at least 2)";
  if (d.type == "OneCycle" && !d.params.count("cycle_min_lr"))
    return "OneCycle needs cycle_min_lr and cycle_max_lr";
  return "";
}

inline bool isSchedule(const std::string &s) {
  return s == "constant" || s == "warmup" || s == "warmup-cosine" ||
         s == "warmup-linear" || scheduleProblem(s, 1, 2).empty();
}

} // namespace ds

#endif // DS_RUNTIME_SCHEDULE_H

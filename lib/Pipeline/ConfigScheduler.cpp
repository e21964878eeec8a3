//===- ConfigScheduler.cpp - a ds_config.json's scheduler section ---------===//
//
// Part of the ds project.
//
// DeepSpeed's learning-rate schedulers (WarmupLR, WarmupDecayLR,
// WarmupCosineLR, OneCycle, LRRangeTest) become a --lr-schedule spec
// "Type:key=value,..." that the runtime evaluates with DeepSpeed's formulas
// and step semantics (include/ds/Runtime/Schedule.h).
//
//===----------------------------------------------------------------------===//

#include "ConfigReader.h"

#include "ds/Runtime/Schedule.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::config;

namespace {

/// DeepSpeed's type name as its scheduler table spells it (DeepSpeed
/// compares them exactly; ds also takes other cases).
std::string canonicalType(llvm::StringRef type) {
  for (const char *t : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                        "OneCycle", "LRRangeTest"})
    if (type.equals_insensitive(t))
      return t;
  return "";
}

/// What "auto" becomes for a scheduler parameter (as HF's Trainer fills
/// them): the spec's value and the words for the notice; "" if the
/// parameter has no automatic value.
std::pair<std::string, std::string> autoParam(llvm::StringRef name) {
  if (name == "warmup_max_lr" || name == "cycle_max_lr")
    return {"lr", "the optimizer's learning rate (--lr)"};
  if (name == "warmup_min_lr" || name == "warmup_min_ratio")
    return {"0", "0"};
  if (name == "warmup_num_steps")
    return {"warmup", "--warmup-steps (DeepSpeed warms up over at least 2)"};
  if (name == "total_num_steps")
    return {"total", "--total-steps"};
  return {"", ""};
}

} // namespace

bool config::readScheduler(Reader &r, const std::string &key, const Value &v) {
  const Object *o = nullptr;
  std::optional<std::string> type = r.typedSection(v, key, o);
  if (!type)
    return false;
  std::string t = canonicalType(*type);
  if (t.empty())
    return r.fail(key + ".type", "'" + *type +
                                     "' is not one of WarmupLR, "
                                     "WarmupDecayLR, WarmupCosineLR, "
                                     "OneCycle, LRRangeTest");
  std::string spec = t;
  char sep = ':';
  bool ok = true;
  if (const Value *pv = o->get("params")) {
    const Object *p = r.object(*pv, key + ".params");
    if (!p)
      return false;
    std::vector<std::string> names;
    for (const auto &kv : *p)
      names.push_back(kv.first.str());
    std::sort(names.begin(), names.end());
    for (const std::string &name : names) {
      std::string pk = key + ".params." + name;
      const Value &val = *p->get(name);
      std::string text;
      if (name == "last_batch_iteration") {
        auto n = r.number(val, pk);
        if (n && *n != -1)
          ok = r.fail(pk, "only -1 (resume with ds-run --resume, which "
                          "restores the step)");
        continue;
      }
      if (name == "cycle_momentum" || name == "cycle_min_mom" ||
          name == "cycle_max_mom" || name == "decay_mom_rate" ||
          name == "cycle_first_stair_count" ||
          name == "cycle_second_stair_count")
        continue; // checked below / unused by DeepSpeed's OneCycle
      if (isAuto(val)) {
        auto [value, words] = autoParam(name);
        if (value.empty()) {
          ok = r.fail(pk, "has no automatic value; give a number");
          continue;
        }
        r.autoValue(pk, words);
        text = value;
      } else if (name == "warmup_type") {
        auto s = r.string(val, pk);
        if (s && *s != "log" && *s != "linear")
          ok = r.fail(pk, "'" + *s + "' is not log or linear");
        text = s.value_or("log");
      } else if (name == "lr_range_test_staircase") {
        auto b = r.boolean(val, pk);
        text = b && *b ? "true" : "false";
        ok &= b.has_value();
      } else if (auto d = r.number(val, pk)) {
        text = fmt(*d);
      } else {
        ok = false;
        continue;
      }
      spec += sep + name + "=" + text;
      sep = ',';
    }
    // OneCycle cycles Adam's beta1 unless told not to; ds cannot (SGD has
    // no betas: DeepSpeed skips it there too).
    if (t == "OneCycle") {
      const Value *cm = p->get("cycle_momentum");
      bool cycles = !cm || !isOff(*cm);
      bool sgd = false;
      for (const ConfigSetting &s : r.config.settings)
        sgd |= s.flag == "optimizer" && s.value == "sgd";
      if (cycles && !sgd)
        ok = r.fail(key + ".params.cycle_momentum",
                    "cycling Adam's beta1 is not supported yet: give "
                    "\"cycle_momentum\": false");
    }
  }
  std::string err;
  ::ds::DeepSpeedSchedule check;
  if (ok && !check.parse(spec, err))
    return r.fail(key + ".params", err);
  if (ok)
    r.set("lr-schedule", spec, key);
  return ok;
}

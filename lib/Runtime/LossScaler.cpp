//===- LossScaler.cpp - DeepSpeed's dynamic loss scaler -------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/LossScaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ds::rt {
namespace {
bool number(const std::map<std::string, std::string> &m, const char *key,
            double &out, std::string &err) {
  auto it = m.find(key);
  if (it == m.end() || it->second.empty())
    return true;
  char *end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (!end || *end || !std::isfinite(v)) {
    err = std::string("loss scaler option ") + key + " is not a number: '" +
          it->second + "'";
    return false;
  }
  out = v;
  return true;
}
} // namespace

bool LossScaler::configure(const std::map<std::string, std::string> &options,
                           std::string &err) {
  double staticScale = 0, power = 16, win = 1000, hyst = 2, consecutive = 0,
         minimum = 1;
  if (!number(options, "loss_scale", staticScale, err) ||
      !number(options, "initial_scale_power", power, err) ||
      !number(options, "loss_scale_window", win, err) ||
      !number(options, "hysteresis", hyst, err) ||
      !number(options, "consecutive_hysteresis", consecutive, err) ||
      !number(options, "min_loss_scale", minimum, err))
    return false;
  if (staticScale < 0 || win < 1 || hyst < 1 || minimum <= 0 || power < 0 ||
      power > 64) {
    err = "loss scaler options out of range (loss_scale >= 0, window >= 1, "
          "hysteresis >= 1, min_loss_scale > 0, initial_scale_power 0-64)";
    return false;
  }
  dynamic = staticScale == 0;
  scale = dynamic ? std::ldexp(1.0, static_cast<int>(power)) : staticScale;
  window = static_cast<int64_t>(win);
  hysteresis = curHysteresis = static_cast<int64_t>(hyst);
  consecutiveHysteresis = consecutive != 0;
  minScale = minimum;
  return true;
}

void LossScaler::update(bool overflow) {
  if (!dynamic) {
    ++curIter;
    return;
  }
  if (overflow) {
    if (hysteresis == 1 || curHysteresis == 1)
      scale = std::max(scale / 2, minScale);
    else
      --curHysteresis;
    lastOverflowIter = curIter;
  } else {
    if (consecutiveHysteresis)
      curHysteresis = hysteresis;
    if ((curIter - lastOverflowIter) % window == 0) {
      if (!consecutiveHysteresis)
        curHysteresis = hysteresis;
      scale *= 2;
    }
  }
  ++curIter;
}

std::map<std::string, std::string> LossScaler::state() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", scale);
  return {{"loss_scale", buf},
          {"cur_hysteresis", std::to_string(curHysteresis)},
          {"cur_iter", std::to_string(curIter)},
          {"last_overflow_iter", std::to_string(lastOverflowIter)}};
}

bool LossScaler::restore(const std::map<std::string, std::string> &st,
                         std::string &err) {
  double v[4] = {scale, double(curHysteresis), double(curIter),
                 double(lastOverflowIter)};
  const char *keys[4] = {"loss_scale", "cur_hysteresis", "cur_iter",
                         "last_overflow_iter"};
  for (int i = 0; i < 4; ++i)
    if (!number(st, keys[i], v[i], err))
      return false;
  scale = v[0];
  curHysteresis = static_cast<int64_t>(v[1]);
  curIter = static_cast<int64_t>(v[2]);
  lastOverflowIter = static_cast<int64_t>(v[3]);
  return true;
}

} // namespace ds::rt

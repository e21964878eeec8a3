//===- DeepSpeedConfigMonitors.cpp - a ds_config.json's logging keys ------===//
//
// Part of the ds project.
//
// steps_per_print, wall_clock_breakdown and the sections tensorboard,
// csv_monitor, comms_logger and flops_profiler are run-time settings: the
// reader turns them into ds-opt options (TrainingOptions.def, "Monitors and
// logging"), the plan records them (plan options "run.*") and ds-run
// honours them (lib/Runtime/Monitor.cpp). Defaults are DeepSpeed's.
//
//===----------------------------------------------------------------------===//

#include "ConfigReader.h"

#include "llvm/ADT/StringExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::config;

namespace {

/// DeepSpeed's comms-logger op names and the kind ds records them under.
const std::vector<std::pair<std::string, std::string>> &commOps() {
  static const std::vector<std::pair<std::string, std::string>> ops = {
      {"all_reduce", "all_reduce"},
      {"all_reduce_coalesced", "all_reduce"},
      {"inference_all_reduce", "all_reduce"},
      {"reduce_scatter", "reduce_scatter"},
      {"reduce_scatter_tensor", "reduce_scatter"},
      {"all_gather", "all_gather"},
      {"all_gather_into_tensor", "all_gather"},
      {"broadcast", "broadcast"},
      {"send", "send"},
      {"isend", "send"},
      {"recv", "recv"},
      {"irecv", "recv"}};
  return ops;
}

/// tensorboard and csv_monitor: {enabled, output_path, job_name} become the
/// folder output_path/job_name (DeepSpeed joins them the same way; its
/// defaults are "" and "DeepSpeedJobName").
bool readMonitorSection(Reader &r, const std::string &key, const Value &v,
                        const std::string &flag) {
  const Object *o = r.object(v, key);
  if (!o)
    return false;
  // An unknown key does not stop the others' checks (all are listed).
  bool ok = r.checkKeys(*o, key, {"enabled", "output_path", "job_name"});
  bool enabled = false;
  std::string path, job = "DeepSpeedJobName";
  if (const Value *e = o->get("enabled")) {
    auto b = r.boolean(*e, key + ".enabled");
    ok &= b.has_value();
    enabled = b.value_or(false);
  }
  if (const Value *p = o->get("output_path"); p && !p->getAsNull()) {
    auto s = r.string(*p, key + ".output_path");
    ok &= s.has_value();
    path = s.value_or("");
  }
  if (const Value *j = o->get("job_name")) {
    auto s = r.string(*j, key + ".job_name");
    ok &= s.has_value();
    if (s && s->empty())
      ok = r.fail(key + ".job_name", "must not be empty (it names the "
                                     "folder inside output_path)");
    job = s.value_or(job);
  }
  if (!ok || !enabled)
    return ok;
  std::string dir = path.empty() ? job
                    : llvm::StringRef(path).ends_with("/") ? path + job
                                                           : path + "/" + job;
  r.set(flag, dir, key);
  return true;
}

/// comms_logger: {enabled, verbose, prof_all, prof_ops, debug}.
bool readCommsLogger(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o)
    return false;
  bool ok = r.checkKeys(*o, key, {"enabled", "verbose", "prof_all",
                                  "prof_ops", "debug"});
  std::map<std::string, bool> flags = {
      {"enabled", false}, {"verbose", false}, {"prof_all", true},
      {"debug", false}};
  for (auto &[name, value] : flags)
    if (const Value *b = o->get(name)) {
      auto got = r.boolean(*b, key + "." + name);
      ok &= got.has_value();
      value = got.value_or(value);
    }
  std::vector<std::string> kinds;
  if (const Value *ops = o->get("prof_ops")) {
    const llvm::json::Array *list = ops->getAsArray();
    if (!list)
      return r.fail(key + ".prof_ops", "expects a list of op names");
    for (const Value &op : *list) {
      auto name = r.string(op, key + ".prof_ops");
      if (!name)
        return false;
      auto it = llvm::find_if(commOps(),
                              [&](const auto &p) { return p.first == *name; });
      if (it == commOps().end())
        return r.fail(key + ".prof_ops",
                      "'" + *name +
                          "' is not a collective ds runs (all_reduce, "
                          "reduce_scatter, all_gather, broadcast, send, recv "
                          "and their DeepSpeed variants)");
      if (!llvm::is_contained(kinds, it->second))
        kinds.push_back(it->second);
    }
  }
  if (!ok || !flags["enabled"])
    return ok;
  r.set("comms-logger", flags["verbose"] ? "verbose" : "summary", key);
  if (!flags["prof_all"])
    r.set("comms-logger-ops", kinds.empty() ? "none" : llvm::join(kinds, ","),
          key + ".prof_ops");
  if (flags["debug"])
    r.set("comms-logger-debug", "true", key + ".debug");
  return true;
}

/// An integer of a section that must be at least `min`.
bool atLeast(Reader &r, const Value &v, const std::string &key, int64_t min,
             int64_t &out) {
  // Reader::integer takes whole numbers >= 0 only (module_depth may be -1).
  auto d = r.number(v, key);
  if (!d)
    return false;
  if (*d != std::floor(*d) || *d > 9e18)
    return r.fail(key, "expects a whole number");
  auto n = std::optional<int64_t>(static_cast<int64_t>(*d));
  if (*n < min)
    return r.fail(key, "must be at least " + std::to_string(min) + ", got " +
                           std::to_string(*n));
  out = *n;
  return true;
}

/// flops_profiler: {enabled, profile_step, module_depth, top_modules,
/// detailed, output_file, recompute_fwd_factor}.
bool readFlopsProfiler(Reader &r, const std::string &key, const Value &v) {
  const Object *o = r.object(v, key);
  if (!o)
    return false;
  bool ok = r.checkKeys(*o, key, {"enabled", "profile_step", "module_depth",
                                  "top_modules", "detailed", "output_file",
                                  "recompute_fwd_factor"});
  bool enabled = false, detailed = true;
  int64_t step = 1, depth = -1, top = 1;
  std::string file;
  for (const auto &kv : *o) {
    std::string name = kv.first.str(), k = key + "." + name;
    const Value &val = kv.second;
    if (name == "enabled" || name == "detailed") {
      auto b = r.boolean(val, k);
      ok &= b.has_value();
      (name == "enabled" ? enabled : detailed) = b.value_or(false);
    } else if (name == "profile_step") {
      ok &= atLeast(r, val, k, 1, step);
    } else if (name == "module_depth") {
      ok &= atLeast(r, val, k, -1, depth);
    } else if (name == "top_modules") {
      ok &= atLeast(r, val, k, 1, top);
    } else if (name == "output_file") {
      if (val.getAsNull())
        continue;
      auto s = r.string(val, k);
      ok &= s.has_value();
      file = s.value_or("");
    } else if (name == "recompute_fwd_factor") {
      auto f = r.number(val, k);
      ok &= f.has_value();
      if (f && *f != 0)
        r.note(k, "accepted without effect: the plan's FLOPs count the "
                  "recomputed forward ops it runs");
    }
  }
  if (!ok || !enabled)
    return ok;
  // DeepSpeed profiles when global_steps (the steps completed) equals
  // profile_step: ds-run's step profile_step + 1.
  r.set("flops-profile-step", std::to_string(step + 1), key + ".profile_step");
  r.set("flops-module-depth", std::to_string(depth), key + ".module_depth");
  r.set("flops-top-modules", std::to_string(top), key + ".top_modules");
  r.set("flops-detailed", detailed ? "true" : "false", key + ".detailed");
  if (!file.empty())
    r.set("flops-output-file", file, key + ".output_file");
  return true;
}

} // namespace

bool config::readMonitorKey(Reader &r, const std::string &key,
                            const Value &v) {
  if (key == "steps_per_print") {
    if (v.getAsNull() || isAuto(v))
      return true; // DeepSpeed's None: ds-run's default (every step)
    int64_t n = 0;
    if (!atLeast(r, v, key, 1, n))
      return false;
    r.set("steps-per-print", std::to_string(n), key);
    return true;
  }
  if (key == "wall_clock_breakdown")
    return r.plain(v, key, key);
  if (key == "tensorboard")
    return readMonitorSection(r, key, v, "tensorboard-dir");
  if (key == "csv_monitor")
    return readMonitorSection(r, key, v, "csv-monitor-dir");
  if (key == "comms_logger")
    return readCommsLogger(r, key, v);
  if (key == "flops_profiler")
    return readFlopsProfiler(r, key, v);
  return true;
}

void mlir::ds::addRunSettings(const TrainingOptions &o,
                              std::map<std::string, std::string> &record) {
  if (o.stepsPerPrint > 0)
    record["run.steps_per_print"] = std::to_string(o.stepsPerPrint);
  if (o.wallClockBreakdown)
    record["run.wall_clock_breakdown"] = "1";
  if (!o.tensorboardDir.empty())
    record["run.tensorboard"] = o.tensorboardDir;
  if (!o.csvMonitorDir.empty())
    record["run.csv_monitor"] = o.csvMonitorDir;
  if (!o.commsLogger.empty()) {
    record["run.comms_logger"] = o.commsLogger;
    if (!o.commsLoggerOps.empty())
      record["run.comms_logger_ops"] = o.commsLoggerOps;
    if (o.commsLoggerDebug)
      record["run.comms_logger_debug"] = "1";
  }
  if (o.flopsProfileStep > 0) {
    record["run.flops_profile_step"] = std::to_string(o.flopsProfileStep);
    record["run.flops_module_depth"] = std::to_string(o.flopsModuleDepth);
    record["run.flops_top_modules"] = std::to_string(o.flopsTopModules);
    record["run.flops_detailed"] = o.flopsDetailed ? "1" : "0";
    if (!o.flopsOutputFile.empty())
      record["run.flops_output_file"] = o.flopsOutputFile;
  }
}

//===- Cluster.cpp - --cluster: a preset or a cluster file ----------------===//
//
// Part of the ds project.
//
// The cluster file's schema is docs/planner.md's; each error names the
// file and the field ("cluster.json: device.memory: expected a number of
// bytes"), an unknown field the nearest known one.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/Cluster.h"
#include "ds/Support/KernelKinds.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/FileSystem.h"

#include <cmath>
#include <tuple>

using namespace mlir;
using namespace mlir::ds;
namespace json = llvm::json;

namespace {

/// Reads one cluster file: each accessor checks its field and records
/// the first problem.
class ClusterReader {
public:
  explicit ClusterReader(llvm::StringRef source) : source(source.str()) {}

  llvm::Error fail(const std::string &path, const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   source + ": " + path + ": " + message);
  }

  /// Every key of `o` is one of `known`.
  llvm::Error keys(const json::Object &o, const std::string &path,
                   llvm::ArrayRef<llvm::StringRef> known) {
    for (const auto &kv : o) {
      llvm::StringRef k = kv.first;
      if (llvm::is_contained(known, k))
        continue;
      llvm::StringRef best;
      unsigned dist = ~0u;
      for (llvm::StringRef n : known)
        if (unsigned d = k.edit_distance(n); d < dist)
          dist = d, best = n;
      return fail(join(path, k), "unknown field (did you mean '" + best +
                                     "'?)");
    }
    return llvm::Error::success();
  }

  /// The object at `key` (null when absent and not required).
  llvm::Expected<const json::Object *> object(const json::Object &o,
                                              llvm::StringRef key,
                                              const std::string &path,
                                              bool required,
                                              const char *why = "") {
    const json::Value *v = o.get(key);
    if (!v) {
      if (required)
        return fail(join(path, key), llvm::Twine("missing") + why);
      return nullptr;
    }
    if (!v->getAsObject())
      return fail(join(path, key), "expected an object");
    return v->getAsObject();
  }

  /// A number of `unit` at `key`, positive (or >= 0 with `zero`); `out`
  /// keeps its value when the field is absent and not required.
  llvm::Error number(const json::Object &o, llvm::StringRef key,
                     const std::string &path, const char *unit, bool required,
                     double &out, bool zero = false) {
    const json::Value *v = o.get(key);
    if (!v)
      return required ? fail(join(path, key),
                             llvm::Twine("missing (a number of ") + unit + ")")
                      : llvm::Error::success();
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d) || *d < 0 || (!zero && *d == 0))
      return fail(join(path, key), llvm::Twine("expected a ") +
                                       (zero ? "" : "positive ") +
                                       "number of " + unit);
    out = *d;
    return llvm::Error::success();
  }

  /// An integer >= 1 at `key` (required).
  llvm::Error count(const json::Object &o, llvm::StringRef key, int &out) {
    const json::Value *v = o.get(key);
    if (!v)
      return fail(key.str(), "missing (an integer >= 1)");
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i < 1 || *i > (1 << 20))
      return fail(key.str(), "expected an integer >= 1");
    out = static_cast<int>(*i);
    return llvm::Error::success();
  }

  /// A number field of an object: its key, unit, whether it is required,
  /// where it goes.
  struct Field {
    llvm::StringRef key;
    const char *unit;
    bool required;
    double *out;
  };

  /// An object of positive numbers: no other keys.
  llvm::Error fields(const json::Object &o, const std::string &path,
                     llvm::ArrayRef<Field> fs) {
    llvm::SmallVector<llvm::StringRef> names;
    for (const Field &f : fs)
      names.push_back(f.key);
    if (llvm::Error e = keys(o, path, names))
      return e;
    for (const Field &f : fs)
      if (llvm::Error e = number(o, f.key, path, f.unit, f.required, *f.out))
        return e;
    return llvm::Error::success();
  }

  /// A link's or a collective's bandwidth and latency.
  llvm::Error link(const json::Object &o, const std::string &path,
                   ::ds::AlphaBeta &out) {
    if (llvm::Error e = keys(o, path, {"bandwidth", "latency"}))
      return e;
    out.present = true;
    if (llvm::Error e = number(o, "bandwidth", path, "bytes/s", true,
                               out.bandwidth))
      return e;
    return number(o, "latency", path, "seconds", true, out.latency, true);
  }

  llvm::Error device(const json::Object &root, ::ds::ClusterSpec &c);
  llvm::Error offload(const json::Object &root, ::ds::ClusterSpec &c);
  llvm::Error kernels(const json::Object &k, ::ds::ClusterSpec &c);
  llvm::Error kinds(const json::Object &k, ::ds::ClusterSpec &c);
  llvm::Error collectives(const json::Object &k, ::ds::ClusterSpec &c);
  llvm::Error calibration(const json::Object &k, ::ds::ClusterSpec &c);

  static std::string join(const std::string &path, llvm::StringRef key) {
    return path.empty() ? key.str() : path + "." + key.str();
  }

private:
  std::string source;
};

llvm::Error ClusterReader::device(const json::Object &root,
                                  ::ds::ClusterSpec &c) {
  llvm::Expected<const json::Object *> d =
      object(root, "device", "", true, " (the devices' memory and rates)");
  if (!d)
    return d.takeError();
  const json::Object &o = **d;
  if (llvm::Error e =
          keys(o, "device", {"kind", "memory", "flops", "memory_bandwidth"}))
    return e;
  if (const json::Value *k = o.get("kind")) {
    std::optional<llvm::StringRef> s = k->getAsString();
    if (!s || (*s != "gpu" && *s != "cpu"))
      return fail("device.kind", "expected \"gpu\" or \"cpu\"");
    c.gpu = *s == "gpu";
  }
  if (llvm::Error e = number(o, "memory", "device", "bytes", true, c.memory))
    return e;
  if (llvm::Error e = number(o, "memory_bandwidth", "device", "bytes/s", true,
                             c.memoryBandwidth))
    return e;
  llvm::Expected<const json::Object *> f =
      object(o, "flops", "device", true,
             " (dense GEMM FLOP/s by precision: fp32, bf16, fp16)");
  if (!f)
    return f.takeError();
  if (llvm::Error e = keys(**f, "device.flops", {"fp32", "bf16", "fp16"}))
    return e;
  for (int i = 0; i < ::ds::kPrecisions; ++i)
    if (llvm::Error e = number(**f, ::ds::precisionName(
                                        static_cast<::ds::Precision>(i)),
                               "device.flops", "FLOP/s", false, c.flops[i]))
      return e;
  if ((*f)->empty())
    return fail("device.flops", "expected at least one of fp32, bf16, fp16");
  return llvm::Error::success();
}

/// The links, the host and NVMe.
llvm::Error ClusterReader::offload(const json::Object &root,
                                   ::ds::ClusterSpec &c) {
  for (auto [key, spec, needed] :
       {std::tuple<llvm::StringRef, ::ds::AlphaBeta *, bool>{
            "intra_node", &c.intraNode, c.devicesPerNode > 1},
        {"inter_node", &c.interNode, c.nodes > 1}}) {
    const char *why = key == "intra_node"
                          ? " (required when devices_per_node > 1)"
                          : " (required when nodes > 1)";
    llvm::Expected<const json::Object *> o = object(root, key, "", needed, why);
    if (!o)
      return o.takeError();
    if (*o)
      if (llvm::Error e = link(**o, key.str(), *spec))
        return e;
  }
  // The optional sections of positive numbers.
  using F = Field;
  for (auto [key, present, fs] :
       {std::tuple<llvm::StringRef, bool *, std::vector<Field>>{
            "host",
            &c.host.present,
            {F{"memory", "bytes", false, &c.host.memory},
             F{"bandwidth", "bytes/s", true, &c.host.bandwidth},
             F{"optimizer_bandwidth", "bytes/s", true,
               &c.host.optimizerBandwidth}}},
        {"nvme",
         &c.nvme.present,
         {F{"read_bandwidth", "bytes/s", true, &c.nvme.readBandwidth},
          F{"write_bandwidth", "bytes/s", true, &c.nvme.writeBandwidth}}}}) {
    llvm::Expected<const json::Object *> o = object(root, key, "", false);
    if (!o)
      return o.takeError();
    if (!*o)
      continue;
    *present = true;
    if (llvm::Error e = fields(**o, key.str(), fs))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error ClusterReader::kernels(const json::Object &k,
                                   ::ds::ClusterSpec &c) {
  if (llvm::Error e = keys(k, "kernels",
                           {"launch_overhead", "dispatch_overhead",
                            "run_overhead", "stash_save_bytes_per_s",
                            "stash_restore_bytes_per_s", "gemm", "families",
                            "kinds"}))
    return e;
  if (llvm::Error e = kinds(k, c))
    return e;
  if (llvm::Error e = number(k, "launch_overhead", "kernels", "seconds", false,
                             c.launchOverhead, true))
    return e;
  // The executor's own time and the pipeline stash's copies (optional;
  // absent: 0, and the stash copied at the memory bandwidth).
  for (auto [key, unit, out, zero] :
       {std::tuple{"dispatch_overhead", "seconds", &c.dispatchOverhead, true},
        {"run_overhead", "seconds", &c.runOverhead, true},
        {"stash_save_bytes_per_s", "bytes/s", &c.stashSaveBytesPerSecond,
         false},
        {"stash_restore_bytes_per_s", "bytes/s",
         &c.stashRestoreBytesPerSecond, false}})
    if (llvm::Error e = number(k, key, "kernels", unit, false, *out, zero))
      return e;
  if (const json::Value *g = k.get("gemm")) {
    const json::Array *a = g->getAsArray();
    if (!a || a->empty())
      return fail("kernels.gemm", "expected a non-empty array of shape "
                                  "classes");
    for (size_t i = 0; i < a->size(); ++i) {
      std::string path = "kernels.gemm[" + std::to_string(i) + "]";
      const json::Object *o = (*a)[i].getAsObject();
      if (!o)
        return fail(path, "expected an object");
      if (llvm::Error e = keys(*o, path, {"max_flops", "flops_per_s"}))
        return e;
      ::ds::ClusterSpec::GemmClass cls;
      bool last = i + 1 == a->size();
      if (llvm::Error e = number(*o, "max_flops", path, "FLOPs", !last,
                                 cls.maxFlops))
        return e;
      if (llvm::Error e = number(*o, "flops_per_s", path, "FLOP/s", true,
                                 cls.flopsPerSecond))
        return e;
      if (!c.gemm.empty() && cls.maxFlops <= c.gemm.back().maxFlops)
        return fail(path + ".max_flops",
                    "expected classes in increasing max_flops");
      c.gemm.push_back(cls);
    }
  }
  llvm::Expected<const json::Object *> f =
      object(k, "families", "kernels", false);
  if (!f)
    return f.takeError();
  if (!*f)
    return llvm::Error::success();
  llvm::SmallVector<llvm::StringRef> names;
  for (int i = 0; i < ::ds::kRateFamilies; ++i)
    names.push_back(::ds::rateFamilyName(static_cast<::ds::RateFamily>(i)));
  if (llvm::Error e = keys(**f, "kernels.families", names))
    return e;
  for (int i = 0; i < ::ds::kRateFamilies; ++i) {
    llvm::Expected<const json::Object *> r =
        object(**f, names[i], "kernels.families", false);
    if (!r)
      return r.takeError();
    if (!*r)
      continue;
    std::string path = "kernels.families." + names[i].str();
    if (llvm::Error e = keys(**r, path, {"flops_per_s", "bytes_per_s"}))
      return e;
    ::ds::ClusterSpec::FamilyRate &rate = c.families[i];
    if (llvm::Error e = number(**r, "flops_per_s", path, "FLOP/s", false,
                               rate.flopsPerSecond))
      return e;
    if (llvm::Error e = number(**r, "bytes_per_s", path, "bytes/s", false,
                               rate.bytesPerSecond))
      return e;
    if ((*r)->empty())
      return fail(path, "expected flops_per_s and/or bytes_per_s");
  }
  return llvm::Error::success();
}

// Per-kernel figures (kernels.kinds, ds-run --calibrate-kernels-of): each
// key a kernel name of KernelKinds.def.
llvm::Error ClusterReader::kinds(const json::Object &k, ::ds::ClusterSpec &c) {
  llvm::Expected<const json::Object *> o = object(k, "kinds", "kernels", false);
  if (!o)
    return o.takeError();
  if (!*o)
    return llvm::Error::success();
  for (const auto &kv : **o) {
    std::string name = kv.first.str(), path = "kernels.kinds." + name;
    ::ds::plan::Kind kind = ::ds::kindOf(name);
    if (kind == ::ds::plan::KIND_UNSPECIFIED)
      return fail(path, "not a kernel name (include/ds/Support/KernelKinds.def)");
    const json::Object *r = kv.second.getAsObject();
    if (!r)
      return fail(path, "expected an object");
    if (llvm::Error e = keys(*r, path, {"bytes_per_s", "overhead"}))
      return e;
    ::ds::ClusterSpec::KindRate rate;
    if (llvm::Error e = number(*r, "bytes_per_s", path, "bytes/s", false,
                               rate.bytesPerSecond))
      return e;
    if (llvm::Error e = number(*r, "overhead", path, "seconds", false,
                               rate.overhead, true))
      return e;
    if (r->empty())
      return fail(path, "expected bytes_per_s and/or overhead");
    c.kinds[static_cast<int>(kind)] = rate;
  }
  return llvm::Error::success();
}

llvm::Error ClusterReader::collectives(const json::Object &k,
                                       ::ds::ClusterSpec &c) {
  llvm::SmallVector<llvm::StringRef> names;
  for (int i = 0; i < ::ds::kLinkKinds; ++i)
    names.push_back(::ds::linkKindName(static_cast<::ds::LinkKind>(i)));
  if (llvm::Error e = keys(k, "collectives", names))
    return e;
  for (int i = 0; i < ::ds::kLinkKinds; ++i) {
    llvm::Expected<const json::Object *> o =
        object(k, names[i], "collectives", false);
    if (!o)
      return o.takeError();
    if (*o)
      if (llvm::Error e =
              link(**o, "collectives." + names[i].str(), c.collectives[i]))
        return e;
  }
  return llvm::Error::success();
}

llvm::Error ClusterReader::calibration(const json::Object &k,
                                       ::ds::ClusterSpec &c) {
  // Provenance: ds-run --calibrate also writes "quick", "copy_bandwidth"
  // and "notes" (docs/calibration.md); the planner reads none of them.
  if (llvm::Error e = keys(k, "calibration",
                           {"date", "threads", "ranks", "host", "seconds",
                            "quick", "copy_bandwidth", "notes"}))
    return e;
  ::ds::ClusterSpec::Calibration &cal = c.calibration;
  cal.present = true;
  for (auto [key, out] : {std::pair<llvm::StringRef, std::string *>{
                              "date", &cal.date},
                          {"host", &cal.host}})
    if (const json::Value *v = k.get(key)) {
      if (!v->getAsString())
        return fail("calibration." + key.str(), "expected a string");
      *out = v->getAsString()->str();
    }
  for (auto [key, out] :
       {std::pair<llvm::StringRef, double *>{"threads", &cal.threads},
        {"ranks", &cal.ranks},
        {"seconds", &cal.seconds}})
    if (llvm::Error e = number(k, key, "calibration", "units", false, *out,
                               true))
      return e;
  return llvm::Error::success();
}

} // namespace

llvm::Expected<::ds::ClusterSpec>
mlir::ds::parseClusterJson(llvm::StringRef text, llvm::StringRef source) {
  ClusterReader r(source);
  llvm::Expected<json::Value> v = json::parse(text);
  if (!v)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   source + ": not JSON: " +
                                       llvm::toString(v.takeError()));
  const json::Object *root = v->getAsObject();
  if (!root)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   source + ": expected a JSON object");
  ::ds::ClusterSpec c;
  if (llvm::Error e = r.keys(*root, "",
                             {"name", "nodes", "devices_per_node", "device",
                              "intra_node", "inter_node", "host", "nvme",
                              "kernels", "collectives", "calibration"}))
    return std::move(e);
  if (const json::Value *n = root->get("name")) {
    if (!n->getAsString())
      return r.fail("name", "expected a string");
    c.name = n->getAsString()->str();
  } else {
    c.name = source.str();
  }
  if (llvm::Error e = r.count(*root, "nodes", c.nodes))
    return std::move(e);
  if (llvm::Error e = r.count(*root, "devices_per_node", c.devicesPerNode))
    return std::move(e);
  if (llvm::Error e = r.device(*root, c))
    return std::move(e);
  if (llvm::Error e = r.offload(*root, c))
    return std::move(e);
  c.launchOverhead = c.gpu ? ::ds::kDefaultGpuLaunch : 0;
  using Section = llvm::Error (ClusterReader::*)(const json::Object &,
                                                 ::ds::ClusterSpec &);
  for (auto [key, read] :
       {std::pair<llvm::StringRef, Section>{"kernels", &ClusterReader::kernels},
        {"collectives", &ClusterReader::collectives},
        {"calibration", &ClusterReader::calibration}}) {
    llvm::Expected<const json::Object *> o = r.object(*root, key, "", false);
    if (!o)
      return o.takeError();
    if (*o)
      if (llvm::Error e = (r.*read)(**o, c))
        return std::move(e);
  }
  return c;
}

llvm::Expected<::ds::ClusterSpec> mlir::ds::loadCluster(llvm::StringRef value) {
  auto error = [](const llvm::Twine &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  if (llvm::sys::fs::exists(value) || value.ends_with(".json")) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
        llvm::MemoryBuffer::getFile(value);
    if (!buf)
      return error("--cluster: cannot read '" + value +
                   "': " + buf.getError().message());
    return parseClusterJson((*buf)->getBuffer(), value);
  }
  auto [name, shape] = value.split(':');
  int nodes = 0, devices = 0;
  if (!shape.empty()) {
    auto [n, d] = shape.split('x');
    if (n.getAsInteger(10, nodes) || d.getAsInteger(10, devices) ||
        nodes < 1 || devices < 1)
      return error("--cluster='" + value +
                   "': expected PRESET[:NODESxDEVICES] (e.g. h100-80g:16x8)");
  }
  ::ds::ClusterSpec c;
  if (!::ds::clusterPreset(name.str(), nodes, devices, c))
    return error("--cluster='" + value + "' is neither a file nor a preset (" +
                 llvm::join(::ds::clusterPresetNames(), ", ") + ")");
  return c;
}

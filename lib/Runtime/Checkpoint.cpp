//===- Checkpoint.cpp - sharded checkpoints -------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Checkpoint.h"
#include "TpSlice.h"
#include "PlanImpl.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/PlanFormat.h"

#include <cinttypes>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace ds::rt {
namespace {

constexpr const char *kManifest = "manifest.txt";
constexpr const char *kMagic = "ds-checkpoint 1";

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "-";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

bool parseShape(const std::string &s, std::vector<int64_t> &shape) {
  shape.clear();
  if (s == "-")
    return true;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, 'x')) {
    char *end = nullptr;
    long long d = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end || d < 0)
      return false;
    shape.push_back(d);
  }
  return true;
}

bool parseDType(const std::string &s, DType &t) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32,
                  DType::Bool})
    if (s == dtypeName(d)) {
      t = d;
      return true;
    }
  return false;
}

std::string shardName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.npz", rank);
  return buf;
}

struct Manifest {
  uint64_t plan = 0;
  std::string optimizer; // the optimizer's kind ("": a forward plan, or
                         // a checkpoint older than this line)
  int world = 0, stage = 0;
  int tensorParallel = 1; // ranks per tensor-parallel group (ZeRO shards
                          // are over world / tensorParallel ranks)
  int64_t step = 0;
  uint64_t runs = 0;
  struct File {
    std::string name;
    uint64_t bytes = 0, hash = 0;
  };
  std::vector<File> files; // by rank
  struct Tensor {
    std::string name, kind; // kind: param, buffer, state
    bool sharded = false;
    int tpAxis = 0, tpParts = 1, tpBlocks = 1; // a tensor-parallel slice per rank
    DType dtype = DType::F32;
    std::vector<int64_t> shape; // whole shape
  };
  std::vector<Tensor> tensors;
  std::map<std::string, std::string> extra; // "state KEY VALUE" lines
};

/// The step folder `dir` names: itself when it holds a manifest, else the
/// one its `latest` file names.
bool resolve(const std::string &dir, std::string &stepDir, std::string &err) {
  if (std::filesystem::exists(dir + "/" + kManifest)) {
    stepDir = dir;
    return true;
  }
  std::ifstream latest(dir + "/latest");
  std::string name;
  if (!latest || !std::getline(latest, name) || name.empty() ||
      name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
    err = "no checkpoint in '" + dir + "' (neither a latest file nor " +
          kManifest + ")";
    return false;
  }
  stepDir = dir + "/" + name;
  return true;
}

bool readManifest(const std::string &stepDir, Manifest &m, std::string &err) {
  std::string path = stepDir + "/" + kManifest;
  std::ifstream in(path);
  if (!in) {
    err = "checkpoint manifest '" + path + "' is missing";
    return false;
  }
  auto bad = [&](const std::string &why) {
    err = "checkpoint manifest '" + path + "' is corrupt: " + why;
    return false;
  };
  std::string line;
  if (!std::getline(in, line) || line != kMagic)
    return bad("it does not start with '" + std::string(kMagic) + "'");
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "plan") {
      std::string h;
      ls >> h;
      m.plan = std::strtoull(h.c_str(), nullptr, 16);
    } else if (key == "optimizer") {
      ls >> m.optimizer;
    } else if (key == "world_size") {
      ls >> m.world;
    } else if (key == "zero_stage") {
      ls >> m.stage;
    } else if (key == "tensor_parallel") {
      ls >> m.tensorParallel;
      if (!ls || m.tensorParallel < 1)
        return bad("bad tensor_parallel line '" + line + "'");
    } else if (key == "step") {
      ls >> m.step;
    } else if (key == "runs") {
      ls >> m.runs;
    } else if (key == "file") {
      int rank = -1;
      Manifest::File f;
      std::string h;
      ls >> rank >> f.name >> f.bytes >> h;
      f.hash = std::strtoull(h.c_str(), nullptr, 16);
      if (!ls || rank != static_cast<int>(m.files.size()) ||
          f.name.find('/') != std::string::npos)
        return bad("bad file line '" + line + "'");
      m.files.push_back(f);
    } else if (key == "tensor") {
      Manifest::Tensor t;
      std::string sharded, dtype, shape;
      ls >> t.kind >> sharded >> dtype >> shape;
      std::getline(ls >> std::ws, t.name);
      t.sharded = sharded == "sharded";
      // "sharded+tp:...": ZeRO shards of a tensor-parallel slice.
      if (sharded.rfind("sharded+tp:", 0) == 0) {
        t.sharded = true;
        sharded = sharded.substr(8);
      }
      if (sharded.rfind("tp:", 0) == 0) {
        // tp:AXIS:PARTS: rank r holds slice r along AXIS.
        char *end = nullptr;
        t.tpAxis = static_cast<int>(std::strtol(sharded.c_str() + 3, &end, 10));
        t.tpParts = *end == ':' ? static_cast<int>(std::strtol(end + 1, &end, 10)) : 0;
        if (*end == ':')
          t.tpBlocks = static_cast<int>(std::strtol(end + 1, &end, 10));
        if (*end || t.tpParts < 2 || t.tpAxis < 0 || t.tpBlocks < 1)
          return bad("bad tensor line '" + line + "'");
      } else if (!t.sharded && sharded != "whole") {
        return bad("bad tensor line '" + line + "'");
      }
      if (t.name.empty() ||
          (t.kind != "param" && t.kind != "buffer" && t.kind != "state") ||
          !parseDType(dtype, t.dtype) || !parseShape(shape, t.shape))
        return bad("bad tensor line '" + line + "'");
      // (A plain split may be padded; blocks divide exactly.)
      if (t.tpParts > 1 && (t.tpAxis >= static_cast<int>(t.shape.size()) ||
                            (t.tpBlocks > 1 &&
                             t.shape[t.tpAxis] % (t.tpParts * t.tpBlocks))))
        return bad("bad tensor line '" + line + "'");
      m.tensors.push_back(t);
    } else if (key == "state") {
      std::string k, v;
      ls >> k >> v;
      if (k.empty() || v.empty())
        return bad("bad state line '" + line + "'");
      m.extra[k] = v;
    } else if (!key.empty()) {
      return bad("unknown key '" + key + "'");
    }
  }
  if (m.world < 1 || static_cast<int>(m.files.size()) != m.world ||
      m.step < 0)
    return bad("world size " + std::to_string(m.world) + " with " +
               std::to_string(m.files.size()) + " shard files");
  return true;
}

/// Reads shard `rank`'s file after checking its size and checksum.
bool readShard(const std::string &stepDir, const Manifest &m, int rank,
               std::map<std::string, HostTensor> &arrays, std::string &err) {
  const Manifest::File &f = m.files[rank];
  std::string path = stepDir + "/" + f.name;
  std::string bytes;
  if (!readFile(path, bytes)) {
    err = "checkpoint shard '" + path + "' of rank " + std::to_string(rank) +
          " is missing";
    return false;
  }
  if (bytes.size() != f.bytes || fnv1a64(bytes.data(), bytes.size()) != f.hash) {
    err = "checkpoint shard '" + path + "' of rank " + std::to_string(rank) +
          " is corrupt (" +
          (bytes.size() != f.bytes ? "size " + std::to_string(bytes.size()) +
                                         ", the manifest says " +
                                         std::to_string(f.bytes)
                                   : std::string("checksum mismatch")) +
          ")";
    return false;
  }
  return readNpz(path, arrays, err, /*u2AsBf16=*/true);
}

} // namespace

namespace {
/// Every tensor of the checkpoint whole (shards concatenated in rank order,
/// padding dropped), in manifest order; optimizer state only `withState`.
bool wholeTensors(const std::string &stepDir, const Manifest &m, bool withState,
                  std::vector<std::pair<std::string, HostTensor>> &whole,
                  std::string &err) {
  std::vector<std::map<std::string, HostTensor>> shards(m.world);
  for (int r = 0; r < m.world; ++r)
    if (!readShard(stepDir, m, r, shards[r], err))
      return false;
  // The f32 master copy of a 16-bit weight (mixed precision) is read even
  // without the other state: it is that weight's value.
  std::set<std::string> params;
  for (const Manifest::Tensor &t : m.tensors)
    if (t.kind == "param")
      params.insert(t.name);
  auto isMaster = [&](const Manifest::Tensor &t) {
    const std::string suffix = ".master";
    return t.kind == "state" && t.name.size() > suffix.size() &&
           t.name.compare(t.name.size() - suffix.size(), suffix.size(),
                          suffix) == 0 &&
           params.count(t.name.substr(0, t.name.size() - suffix.size()));
  };
  for (const Manifest::Tensor &t : m.tensors) {
    if (t.kind == "state" && !withState && !isMaster(t))
      continue;
    HostTensor w;
    w.dtype = t.dtype;
    w.shape = t.shape;
    size_t want = w.numel() * dtypeSize(t.dtype);
    // ZeRO shards: those of the data-parallel group of tensor-parallel
    // index 0 (ranks 0, T, 2T, ...; the other groups hold the same).
    int parts = t.sharded ? m.world : t.tpParts > 1 ? t.tpParts : 1;
    if (t.tpParts > 1 && (t.tpParts > m.world || m.world % t.tpParts)) {
      err = "checkpoint tensor '" + t.name + "' is split over " +
            std::to_string(t.tpParts) + " ranks, the checkpoint has " +
            std::to_string(m.world);
      return false;
    }
    std::vector<HostTensor *> slices;
    for (int r = 0; r < parts; ++r) {
      auto it = shards[r].find(t.name);
      if (it == shards[r].end() || it->second.dtype != t.dtype) {
        err = "checkpoint shard of rank " + std::to_string(r) + " has no " +
              dtypeName(t.dtype) + " '" + t.name + "'";
        return false;
      }
      slices.push_back(&it->second);
    }
    // ZeRO shards of tensor-parallel slices: slice t is the data-parallel
    // ranks d*T + t's shards in order, padding dropped.
    std::vector<HostTensor> joined;
    if (t.sharded && t.tpParts > 1) {
      size_t sliceBytes = TpLayout(t.shape, t.tpAxis, t.tpParts, t.tpBlocks)
                              .sliceBytes(dtypeSize(t.dtype));
      for (int tp = 0; tp < t.tpParts; ++tp) {
        HostTensor one;
        for (int r = tp; r < m.world; r += t.tpParts)
          one.data.insert(one.data.end(), slices[r]->data.begin(),
                          slices[r]->data.end());
        if (one.data.size() < sliceBytes) {
          err = "checkpoint tensor '" + t.name + "' has too few shard bytes";
          return false;
        }
        one.data.resize(sliceBytes);
        joined.push_back(std::move(one));
      }
      slices.clear();
      for (HostTensor &one : joined)
        slices.push_back(&one);
      parts = t.tpParts;
    }
    if (t.tpParts > 1) {
      // Join the slices along the axis.
      TpLayout layout(t.shape, t.tpAxis, t.tpParts, t.tpBlocks);
      size_t sliceBytes = layout.sliceBytes(dtypeSize(t.dtype));
      for (HostTensor *s : slices)
        if (s->data.size() != sliceBytes) {
          err = "checkpoint tensor '" + t.name + "' has a slice of " +
                std::to_string(s->data.size()) + " bytes, not " +
                std::to_string(sliceBytes);
          return false;
        }
      w.data.resize(want);
      for (int r = 0; r < parts; ++r)
        layout.join(slices[r]->data.data(), w.data.data(), r,
                    dtypeSize(t.dtype));
    } else {
      int step = t.sharded ? std::max(1, m.tensorParallel) : 1;
      for (size_t r = 0; r < slices.size(); r += step)
        w.data.insert(w.data.end(), slices[r]->data.begin(),
                      slices[r]->data.end());
    }
    for (HostTensor *s : slices) {
      s->data.clear();
      s->data.shrink_to_fit();
    }
    if (w.data.size() < want) {
      err = "checkpoint tensor '" + t.name + "' holds " +
            std::to_string(w.data.size()) + " bytes, its shape " +
            w.shapeString() + " needs " + std::to_string(want);
      return false;
    }
    w.data.resize(want); // drop the shards' padding
    whole.push_back({t.name, std::move(w)});
  }
  return true;
}

/// This rank's part of whole tensor `t` into storage `st`: its
/// tensor-parallel slice, and of that (or of the whole) its ZeRO shard.
void cutInto(const Executor::Storage &st, const HostTensor &t, int rank,
             int tensorParallel) {
  auto *dst = static_cast<unsigned char *>(st.data);
  if (st.tpParts > 1) {
    TpLayout layout(st.wholeShape(), st.tpAxis, st.tpParts, st.tpBlocks);
    if (!st.sharded) {
      layout.cut(t.data.data(), dst, rank % st.tpParts, dtypeSize(st.dtype));
      return;
    }
    std::vector<unsigned char> slice(layout.sliceBytes(dtypeSize(st.dtype)));
    layout.cut(t.data.data(), slice.data(), rank % st.tpParts,
               dtypeSize(st.dtype));
    size_t shardBytes = st.bytes, first = shardBytes * (rank / st.tpParts);
    std::memset(dst, 0, shardBytes);
    if (first < slice.size())
      std::memcpy(dst, slice.data() + first,
                  std::min(shardBytes, slice.size() - first));
    return;
  }
  if (!st.sharded) {
    std::memcpy(dst, t.data.data(), st.bytes);
    return;
  }
  size_t shardBytes = st.bytes, first = shardBytes * (rank / tensorParallel);
  std::memset(dst, 0, shardBytes);
  if (first < t.data.size())
    std::memcpy(dst, t.data.data() + first,
                std::min(shardBytes, t.data.size() - first));
}

/// A checkpoint resumes only under the optimizer that saved it (a
/// checkpoint from before the manifest named it is checked by its tensors
/// alone).
bool sameOptimizer(const std::string &stepDir, const Manifest &m,
                   const PlanInfo &info, std::string &err) {
  if (m.optimizer.empty() || m.optimizer == info.optimizer)
    return true;
  err = "checkpoint '" + stepDir + "' was saved with the optimizer '" +
        m.optimizer + "', this plan trains with '" +
        (info.optimizer.empty() ? std::string("none") : info.optimizer) + "'";
  return false;
}

/// What a manifest's tensor or a plan's storage is, for an error message.
std::string tensorText(const std::string &kind, DType dtype,
                       const std::vector<int64_t> &shape) {
  return kind + " " + dtypeName(dtype) + " " + shapeText(shape);
}

/// Loads a checkpoint saved by another plan of the same model and
/// optimizer (another world size, ZeRO stage, tensor- or pipeline-parallel
/// layout, recompute choice or buckets) into this rank's storage: every
/// tensor rebuilt whole, then cut by this plan's partition. The tensors
/// must be the same (names, kinds, types, whole shapes): the first that
/// differs is named.
bool loadRepartitioned(const std::string &stepDir, const Manifest &m,
                       Executor &exec, int rank, int tensorParallel,
                       std::string &err) {
  std::vector<Executor::Storage> storage = exec.storage();
  std::map<std::string, const Manifest::Tensor *> byName;
  for (const Manifest::Tensor &t : m.tensors)
    byName[t.name] = &t;
  const std::string refused = "checkpoint '" + stepDir +
                              "' holds another model or optimizer state: ";
  std::set<std::string> ours;
  for (const Executor::Storage &st : storage) {
    ours.insert(st.name);
    auto it = byName.find(st.name);
    const char *kind = st.state ? "state" : st.trainable ? "param" : "buffer";
    std::string want = tensorText(kind, st.dtype, st.wholeShape());
    if (it == byName.end()) {
      err = refused + "it has no '" + st.name + "' (this plan's " + want + ")";
      return false;
    }
    std::string have =
        tensorText(it->second->kind, it->second->dtype, it->second->shape);
    if (have != want) {
      err = refused + "'" + st.name + "' is " + have + " there, " + want +
            " in this plan";
      return false;
    }
  }
  for (const Manifest::Tensor &t : m.tensors)
    if (!ours.count(t.name)) {
      err = refused + "it has '" + t.name + "' (" +
            tensorText(t.kind, t.dtype, t.shape) + "), which this plan has not";
      return false;
    }
  std::vector<std::pair<std::string, HostTensor>> whole;
  if (!wholeTensors(stepDir, m, true, whole, err))
    return false;
  std::map<std::string, const HostTensor *> wholeByName;
  for (const auto &[name, t] : whole)
    wholeByName[name] = &t;
  for (const Executor::Storage &st : storage)
    cutInto(st, *wholeByName.at(st.name), rank, tensorParallel);
  return true;
}
} // namespace

bool saveCheckpoint(const std::string &dir, Executor &exec, Communicator &comm,
                    const PlanInfo &info, int64_t step,
                    const std::map<std::string, std::string> &extra,
                    std::string &err) {
  if (exec.storage().empty() && !exec.parameterNames().empty()) {
    err = "cannot read the parameters back from " + exec.deviceName();
    return false;
  }
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  std::string stepDir = dir + "/" + name;
  std::vector<Executor::Storage> storage = exec.storage();
  // This rank's shard file.
  bool ok = true;
  std::error_code ec;
  std::filesystem::create_directories(stepDir, ec);
  if (ec) {
    err = "cannot create '" + stepDir + "': " + ec.message();
    ok = false;
  }
  std::string path = stepDir + "/" + shardName(comm.rank());
  uint64_t record[3] = {0, 0, 0}; // ok, bytes, hash
  if (ok) {
    std::vector<HostTensor> tensors(storage.size());
    std::vector<std::pair<std::string, const HostTensor *>> arrays;
    for (size_t i = 0; i < storage.size(); ++i) {
      tensors[i].dtype = storage[i].dtype;
      tensors[i].shape = storage[i].shape;
      const auto *data = static_cast<const unsigned char *>(storage[i].data);
      tensors[i].data.assign(data, data + storage[i].bytes);
      arrays.push_back({storage[i].name, &tensors[i]});
    }
    std::string bytes;
    ok = encodeNpz(arrays, bytes, err) && writeAtomically(path, bytes, err);
    if (ok) {
      record[0] = 1;
      record[1] = bytes.size();
      record[2] = fnv1a64(bytes.data(), bytes.size());
    }
  }
  // Fault injection for the tests (docs/reliability.md): die with the
  // shard written and the manifest not.
  if (const char *fault = std::getenv("DS_FAULT");
      fault && std::string(fault) == "kill-in-save")
    std::raise(SIGKILL);
  // Rank 0 writes the manifest once every shard is on disk, then `latest`.
  std::vector<uint64_t> all(3 * comm.size());
  std::string why;
  if (!comm.allGather(record, all.data(), 3, DType::I64, why)) {
    err = why;
    return false;
  }
  bool everyone = true;
  for (int r = 0; r < comm.size(); ++r)
    everyone &= all[3 * r] == 1;
  if (!everyone) {
    if (ok)
      err = "another rank could not write its checkpoint shard";
    return false;
  }
  bool written = true;
  if (comm.rank() == 0) {
    std::string text = std::string(kMagic) + "\n";
    text += "plan " + hex(info.planHash) + "\n";
    if (!info.optimizer.empty())
      text += "optimizer " + info.optimizer + "\n";
    text += "world_size " + std::to_string(comm.size()) + "\n";
    if (info.tensorParallel > 1)
      text += "tensor_parallel " + std::to_string(info.tensorParallel) + "\n";
    text += "zero_stage " + std::to_string(info.zeroStage) + "\n";
    text += "step " + std::to_string(step) + "\n";
    text += "runs " + std::to_string(exec.completedRuns()) + "\n";
    text += "state skipped_runs " + std::to_string(exec.skippedRuns()) + "\n";
    for (const auto &[k, v] : extra)
      text += "state " + k + " " + v + "\n";
    for (int r = 0; r < comm.size(); ++r)
      text += "file " + std::to_string(r) + " " + shardName(r) + " " +
              std::to_string(all[3 * r + 1]) + " " + hex(all[3 * r + 2]) + "\n";
    for (const Executor::Storage &st : storage)
      text += std::string("tensor ") +
              (st.state ? "state" : st.trainable ? "param" : "buffer") + " " +
              (st.sharded && st.tpParts <= 1 ? std::string("sharded")
               : st.tpParts > 1 ? std::string(st.sharded ? "sharded+" : "") +
                                      "tp:" + std::to_string(st.tpAxis) + ":" +
                                      std::to_string(st.tpParts) +
                                      (st.tpBlocks > 1
                                           ? ":" + std::to_string(st.tpBlocks)
                                           : std::string())
                                : std::string("whole")) +
              " " + dtypeName(st.dtype) + " " + shapeText(st.wholeShape()) + " " +
              st.name + "\n";
    written = writeAtomically(stepDir + "/" + kManifest, text, err) &&
              writeAtomically(dir + "/latest", std::string(name) + "\n", err);
  }
  if (!comm.allOk(written)) {
    if (written)
      err = "rank 0 could not write the checkpoint manifest";
    return false;
  }
  return true;
}

bool loadCheckpoint(const std::string &dir, Executor &exec, int rank,
                    const PlanInfo &info, int64_t &step, bool &repartitioned,
                    std::map<std::string, std::string> &extra,
                    std::string &err) {
  repartitioned = false;
  std::string stepDir;
  Manifest m;
  if (!resolve(dir, stepDir, err) || !readManifest(stepDir, m, err))
    return false;
  if (m.plan != info.planHash) {
    // Another plan of the same model and optimizer (world size, ZeRO
    // stage, layout, recompute, buckets, learning rate) is re-partitioned;
    // another optimizer or other tensors are refused.
    if (!sameOptimizer(stepDir, m, info, err))
      return false;
    // 1-bit Adam's server errors differ per rank and its error buffers'
    // shapes depend on the world size: only its own shards resume it.
    // (ZeRO 1-3: onebit_adam_local, whose buckets' worker errors are
    // per rank too; 0/1 Adam's likewise.)
    bool perRank = info.optimizer == "onebit_adam" ||
                   info.optimizer == "onebit_adam_local" ||
                   info.optimizer == "zero_one_adam" ||
                   info.optimizer == "onebit_lamb";
    if (perRank && m.world != info.worldSize) {
      err = std::string(info.optimizer == "zero_one_adam" ? "a 0/1 Adam"
                        : info.optimizer == "onebit_lamb" ? "a 1-bit LAMB"
                                                          : "a 1-bit Adam") +
            " checkpoint of " + std::to_string(m.world) +
            " ranks cannot resume on " + std::to_string(info.worldSize) +
            " (its error-feedback buffers are per rank)";
      return false;
    }
    if (perRank) {
      std::map<std::string, HostTensor> own;
      if (!readShard(stepDir, m, rank, own, err))
        return false;
      for (const Executor::Storage &st : exec.storage()) {
        auto it = own.find(st.name);
        if (it == own.end() || it->second.data.size() != st.bytes) {
          err = "checkpoint tensor '" + st.name + "' differs from the plan's";
          return false;
        }
        std::memcpy(st.data, it->second.data.data(), st.bytes);
      }
    } else if (!loadRepartitioned(stepDir, m, exec, rank,
                           std::max(1, info.tensorParallel), err))
      return false;
    exec.setCompletedRuns(m.runs);
    exec.setSkippedRuns(std::strtoull(m.extra["skipped_runs"].c_str(), nullptr, 10));
    extra = m.extra;
    step = m.step;
    repartitioned = true;
    return true;
  }
  std::map<std::string, HostTensor> arrays;
  if (!readShard(stepDir, m, rank, arrays, err))
    return false;
  for (const Executor::Storage &st : exec.storage()) {
    auto it = arrays.find(st.name);
    if (it == arrays.end()) {
      err = "checkpoint shard of rank " + std::to_string(rank) + " has no '" +
            st.name + "'";
      return false;
    }
    const HostTensor &t = it->second;
    if (t.dtype != st.dtype || t.shape != st.shape || t.data.size() != st.bytes) {
      err = "checkpoint tensor '" + st.name + "' is " + dtypeName(t.dtype) +
            " " + t.shapeString() + ", the plan's is different";
      return false;
    }
    std::memcpy(st.data, t.data.data(), st.bytes);
  }
  exec.setCompletedRuns(m.runs);
  exec.setSkippedRuns(std::strtoull(m.extra["skipped_runs"].c_str(), nullptr, 10));
  extra = m.extra;
  step = m.step;
  return true;
}

int pipelineCheckpointStages(const std::string &dir) {
  std::error_code ec;
  int k = 0;
  while (std::filesystem::is_directory(dir + "/stage-" + std::to_string(k), ec))
    ++k;
  return k;
}

bool loadPipelineCheckpoint(const std::string &dir, Executor &exec, int rank,
                            const PlanInfo &info, int64_t &step,
                            std::map<std::string, std::string> &extra,
                            std::string &err) {
  std::vector<std::string> sources;
  int stages = pipelineCheckpointStages(dir);
  for (int k = 0; k < stages; ++k)
    sources.push_back(dir + "/stage-" + std::to_string(k));
  if (sources.empty())
    sources.push_back(dir);
  // Each source's manifest and whole tensors; a name's first holder wins.
  std::map<std::string, Manifest::Tensor> meta;
  std::map<std::string, HostTensor> whole;
  std::vector<std::string> wanted;
  for (const Executor::Storage &st : exec.storage())
    wanted.push_back(st.name);
  uint64_t skipped = 0;
  for (size_t k = 0; k < sources.size(); ++k) {
    std::string stepDir;
    Manifest m;
    if (!resolve(sources[k], stepDir, err) || !readManifest(stepDir, m, err) ||
        !sameOptimizer(stepDir, m, info, err)) {
      if (stages)
        err = "stage " + std::to_string(k) + ": " + err;
      return false;
    }
    if (k == 0) {
      step = m.step;
      extra = m.extra;
      skipped = std::strtoull(m.extra["skipped_runs"].c_str(), nullptr, 10);
    } else if (m.step != step) {
      err = "the stages' checkpoints in '" + dir + "' are at different steps (" +
            std::to_string(step) + " and " + std::to_string(m.step) + ")";
      return false;
    }
    bool needed = false;
    for (const Manifest::Tensor &t : m.tensors)
      if (!meta.count(t.name) &&
          std::find(wanted.begin(), wanted.end(), t.name) != wanted.end()) {
        meta[t.name] = t;
        needed = true;
      }
    if (!needed)
      continue;
    std::vector<std::pair<std::string, HostTensor>> tensors;
    if (!wholeTensors(stepDir, m, true, tensors, err))
      return false;
    for (auto &[name, t] : tensors)
      if (meta.count(name) && !whole.count(name))
        whole[name] = std::move(t);
  }
  for (const Executor::Storage &st : exec.storage()) {
    const char *kind = st.state ? "state" : st.trainable ? "param" : "buffer";
    auto it = meta.find(st.name);
    if (it == meta.end()) {
      // Between steps a gradient accumulator is zero.
      static const std::string accum = ".grad_accum";
      if (st.state && st.name.size() > accum.size() &&
          st.name.compare(st.name.size() - accum.size(), accum.size(),
                          accum) == 0) {
        std::memset(st.data, 0, st.bytes);
        continue;
      }
      err = "the checkpoint in '" + dir + "' has no '" + st.name +
            "' (saved by another model or optimizer?)";
      return false;
    }
    const Manifest::Tensor &t = it->second;
    if (t.kind != kind || t.dtype != st.dtype || t.shape != st.wholeShape()) {
      err = "the checkpoint in '" + dir + "' holds '" + st.name + "' as " +
            t.kind + " " + dtypeName(t.dtype) + " " + shapeText(t.shape) +
            ", this plan as " + kind + " " + dtypeName(st.dtype) + " " +
            shapeText(st.wholeShape());
      return false;
    }
    cutInto(st, whole.at(st.name), rank, std::max(1, info.tensorParallel));
  }
  exec.setSkippedRuns(skipped);
  exec.setCompletedRuns(static_cast<uint64_t>(step) *
                            std::max<int64_t>(1, info.accumSteps) +
                        skipped);
  return true;
}

/// The whole tensors of one checkpoint (a 16-bit weight as its f32 master
/// copy, under the weight's name), appended to `arrays` unless a tensor of
/// that name is already there (a pipeline's tied weight, in two stages).
static bool collectWhole(const std::string &dir, bool withState,
                         std::vector<std::pair<std::string, HostTensor>> &arrays,
                         std::string &err) {
  std::string stepDir;
  Manifest m;
  if (!resolve(dir, stepDir, err) || !readManifest(stepDir, m, err))
    return false;
  std::vector<std::pair<std::string, HostTensor>> whole;
  if (!wholeTensors(stepDir, m, withState, whole, err))
    return false;
  std::map<std::string, const HostTensor *> byName;
  for (const auto &[name, t] : whole)
    byName[name] = &t;
  std::set<std::string> masters;
  for (const Manifest::Tensor &t : m.tensors)
    if (t.kind == "param" && byName.count(t.name + ".master"))
      masters.insert(t.name + ".master");
  for (const auto &[name, t] : whole) {
    if (masters.count(name) && !withState)
      continue;
    bool have = false;
    for (const auto &a : arrays)
      have |= a.first == name;
    if (have)
      continue;
    auto master = byName.find(name + ".master");
    arrays.push_back(
        {name, masters.count(name + ".master") ? *master->second : t});
  }
  return true;
}

bool consolidateCheckpoint(const std::string &dir, const std::string &out,
                           bool withState, std::string &err) {
  std::vector<std::pair<std::string, HostTensor>> owned;
  // A pipeline's checkpoint: one checkpoint per stage (model chunk) in
  // DIR/stage-K.
  std::error_code ec;
  if (std::filesystem::is_directory(dir + "/stage-0", ec)) {
    for (int k = 0; std::filesystem::is_directory(
             dir + "/stage-" + std::to_string(k), ec);
         ++k)
      if (!collectWhole(dir + "/stage-" + std::to_string(k), withState, owned,
                        err)) {
        err = "stage " + std::to_string(k) + ": " + err;
        return false;
      }
  } else if (!collectWhole(dir, withState, owned, err)) {
    return false;
  }
  std::vector<std::pair<std::string, const HostTensor *>> arrays;
  for (const auto &[name, t] : owned)
    arrays.push_back({name, &t});
  auto endsWith = [&](const std::string &suffix) {
    return out.size() >= suffix.size() &&
           out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (endsWith(".safetensors"))
    return writeSafetensors(out, arrays, err);
  if (endsWith(".npz"))
    return writeNpz(out, arrays, err);
  err = "--consolidate writes .safetensors or .npz, got '" + out + "'";
  return false;
}

} // namespace ds::rt

//===- TrainerCheckpoint.cpp - checkpoints and trained weights of a run --===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A training run saves sharded checkpoints at its cadence (every rank its
// shard; with pipeline parallelism each model chunk to DIR/stage-K over its
// stage's ranks), resumes from one (re-partitioned when it was saved with
// another layout), and writes the trained weights (ZeRO shards gathered,
// each pipeline stage's sent to the writer).
//
//===----------------------------------------------------------------------===//

#include "TrainerImpl.h"
#include "ds/Runtime/Checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace ds::rt {

namespace {

std::string chunkFolder(const RunContext &ctx, const std::string &dir,
                        size_t k) {
  return dir + "/stage-" +
         std::to_string(ctx.stage + static_cast<int>(k) * ctx.stages);
}

/// Loads model chunk k's checkpoint; `done` is the step it was saved at.
bool loadChunk(RunContext &ctx, size_t k, bool otherLayout, int64_t &done,
               bool &repartitioned, std::map<std::string, std::string> &extra,
               std::string &err) {
  const std::string &resumeDir = ctx.opts.resumeDir;
  Executor &exec = *ctx.execs[k];
  int myRank = ctx.stages == 1 ? ctx.world.rank() : ctx.sc->rank();
  PlanInfo chunkInfo =
      ctx.stages == 1 ? ctx.info : describe(*ctx.chunkPlans[k]);
  if (otherLayout) {
    repartitioned = true;
    return loadPipelineCheckpoint(resumeDir, exec, myRank, chunkInfo, done,
                                  extra, err) &&
           exec.commitStorage(err);
  }
  std::string dir =
      ctx.stages == 1 ? resumeDir : chunkFolder(ctx, resumeDir, k);
  return loadCheckpoint(dir, exec, myRank, chunkInfo, done, repartitioned,
                        extra, err) &&
         exec.commitStorage(err);
}

/// Pipeline parallelism, --save-weights: each stage's first rank sends its
/// stage's weights (name, dtype, shape, bytes) to the writer.
bool sendStageWeights(
    Communicator &world, int writerRank, int tag,
    const std::vector<std::pair<std::string, const HostTensor *>> &own,
    std::string &err) {
  std::string blob;
  auto put = [&](const void *p, size_t n) {
    blob.append(static_cast<const char *>(p), n);
  };
  uint64_t count = own.size();
  put(&count, 8);
  for (const auto &[name, t] : own) {
    uint64_t n = name.size(), rank = t->shape.size(), bytes = t->data.size();
    int32_t dtype = static_cast<int32_t>(t->dtype);
    put(&n, 8);
    put(name.data(), n);
    put(&dtype, 4);
    put(&rank, 8);
    put(t->shape.data(), rank * 8);
    put(&bytes, 8);
    put(t->data.data(), bytes);
  }
  uint64_t size = blob.size();
  return world.send(&size, 8, writerRank, tag, err) &&
         world.send(blob.data(), size, writerRank, tag + 1, err) &&
         world.flushSends(err);
}

/// The writer: stage `st`'s weights, as sendStageWeights sent them.
bool receiveStageWeights(
    Communicator &world, int st, int from, int tag,
    std::vector<std::pair<std::string, HostTensor>> &received,
    std::string &err) {
  uint64_t size = 0;
  if (!world.recv(&size, 8, from, tag, err))
    return false;
  std::string blob(size, '\0');
  if (!world.recv(blob.data(), size, from, tag + 1, err))
    return false;
  size_t at = 0;
  auto get = [&](void *p, size_t n) {
    if (at + n > blob.size())
      return false;
    std::memcpy(p, blob.data() + at, n);
    at += n;
    return true;
  };
  std::string bad = "stage " + std::to_string(st) + " sent bad weights";
  uint64_t count = 0;
  if (!get(&count, 8))
    return (err = bad, false);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t n = 0, rank = 0, bytes = 0;
    int32_t dtype = 0;
    HostTensor t;
    std::string name;
    if (!get(&n, 8) || n > blob.size())
      return (err = bad, false);
    name.resize(n);
    if (!get(name.data(), n) || !get(&dtype, 4) || !get(&rank, 8) || rank > 64)
      return (err = bad, false);
    t.dtype = static_cast<DType>(dtype);
    t.shape.resize(rank);
    if (!get(t.shape.data(), rank * 8) || !get(&bytes, 8) || bytes > blob.size())
      return (err = bad, false);
    t.data.resize(bytes);
    if (!get(t.data.data(), bytes))
      return (err = bad, false);
    received.push_back({name, std::move(t)});
  }
  return true;
}

bool exchangeStageWeights(
    RunContext &ctx,
    const std::vector<std::pair<std::string, const HostTensor *>> &own,
    std::vector<std::pair<std::string, HostTensor>> &received,
    std::string &err) {
  const int writerRank = (ctx.stages - 1) * ctx.stageRanks, tag = 30001;
  bool stageLead = ctx.sc->rank() == 0, writer = ctx.lead;
  if (stageLead && !writer)
    return sendStageWeights(ctx.world, writerRank, tag, own, err);
  if (!writer)
    return true;
  for (int st = 0; st < ctx.stages - 1; ++st)
    if (!receiveStageWeights(ctx.world, st, st * ctx.stageRanks, tag, received,
                             err))
      return false;
  return true;
}

} // namespace

bool probeSaveFolder(RunContext &ctx) {
  const std::string &saveDir = ctx.opts.saveDir;
  if (saveDir.empty())
    return true;
  std::error_code ec;
  std::filesystem::create_directories(saveDir, ec);
  std::string probe =
      saveDir + "/.ds-write-test-" + std::to_string(ctx.world.rank());
  std::FILE *f = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!f)
    return ctx.failEveryRank("--save '" + saveDir +
                             "' is not a writable folder" +
                             (ec ? " (" + ec.message() + ")" : ""));
  std::fclose(f);
  std::remove(probe.c_str());
  return true;
}

bool resumeRun(RunContext &ctx, TrainState &ts) {
  const std::string &resumeDir = ctx.opts.resumeDir;
  // Every rank checks its own shard; all agree before going on.
  int64_t done = 0;
  bool repartitioned = false;
  std::map<std::string, std::string> extra;
  std::string err;
  // A checkpoint of another pipeline layout (another stage or chunk count,
  // or none where the plan has stages, or stages where it has none) is
  // merged and re-partitioned.
  int savedStages = pipelineCheckpointStages(resumeDir);
  int chunks = ctx.stages * static_cast<int>(ctx.execs.size());
  bool otherLayout = ctx.stages == 1 ? savedStages > 0 : savedStages != chunks;
  bool ok = true;
  for (size_t k = 0; k < ctx.execs.size() && ok; ++k) {
    int64_t chunkDone = 0;
    ok = loadChunk(ctx, k, otherLayout, chunkDone, repartitioned, extra, err);
    if (ok && k > 0 && chunkDone != done) {
      err = "its model chunks were saved at different steps (" +
            std::to_string(done) + " and " + std::to_string(chunkDone) + ")";
      ok = false;
    }
    done = chunkDone;
  }
  if (ok && ctx.stages > 1) {
    // Every stage at the same step (a save that stopped half way leaves
    // them apart).
    float mine = static_cast<float>(done), sum = mine;
    if (!ctx.world.allReduce(&sum, 1, DType::F32, false, err))
      return ctx.fail(err);
    if (sum != mine * static_cast<float>(ctx.world.size())) {
      err = "the stages' checkpoints in '" + resumeDir +
            "' are at different steps (this stage's: " + std::to_string(done) +
            ")";
      ok = false;
    }
  }
  if (ok && ctx.info.lossScaling)
    ok = ts.scaler.restore(extra, err);
  if (ok)
    ok = restoreFreezeAuto(ctx, ts.freeze, extra, err);
  if (!ctx.world.allOk(ok))
    return ctx.failEveryRank(
        ok ? "the checkpoint was rejected on another rank" : err);
  if (done >= ctx.opts.steps)
    return ctx.failEveryRank("the checkpoint in '" + resumeDir +
                             "' is at step " + std::to_string(done) +
                             "; --steps " + std::to_string(ctx.opts.steps) +
                             " asks for no more");
  ts.firstStep = done + 1;
  if (ctx.lead)
    std::printf("resumed from '%s' at step %lld%s\n", resumeDir.c_str(),
                static_cast<long long>(done),
                repartitioned ? " (saved by another plan of the same model "
                                "and optimizer: re-partitioned)"
                              : "");
  return true;
}

bool saveStep(RunContext &ctx, TrainState &ts, long long s) {
  const RunOptions &o = ctx.opts;
  if (o.saveDir.empty() || !(s == o.steps || (o.saveEvery && s % o.saveEvery == 0)))
    return true;
  // A pipeline: each model chunk to DIR/stage-K, over its stage's ranks;
  // every rank agrees that all saved before going on.
  std::string err;
  bool saved = true;
  std::map<std::string, std::string> extra, chunkExtra;
  if (ctx.info.lossScaling)
    extra = ts.scaler.state();
  freezeAutoState(ts.freeze, extra);
  // Each pipeline chunk's manifest: the freeze_step auto decision (the
  // same on every rank).
  freezeAutoState(ts.freeze, chunkExtra);
  for (size_t k = 0; k < ctx.execs.size() && saved; ++k)
    saved = ctx.stages == 1
                ? saveCheckpoint(o.saveDir, *ctx.exec(), ctx.world, ctx.info, s,
                                 extra, err)
                : saveCheckpoint(chunkFolder(ctx, o.saveDir, k), *ctx.execs[k],
                                 *ctx.sc, describe(*ctx.chunkPlans[k]), s,
                                 chunkExtra, err);
  if (ctx.stages > 1 && !ctx.world.allOk(saved) && saved) {
    saved = false;
    err = "the checkpoint failed on another stage";
  }
  // Every rank knows the save failed; the previous checkpoint stays.
  if (!saved)
    return ctx.failEveryRank("checkpoint at step " + std::to_string(s) + ": " +
                             err);
  if (ctx.lead)
    std::printf("checkpoint: step %lld saved to '%s'\n", s, o.saveDir.c_str());
  return true;
}

bool saveTrainedWeights(RunContext &ctx) {
  const std::string &path = ctx.opts.saveWeights;
  if (path.empty())
    return true;
  std::string err;
  // Every rank takes part (ZeRO-3 shards are gathered); the lead writes.
  std::vector<std::string> names;
  std::vector<Executor *> owner;
  for (Executor *e : ctx.allExecs())
    for (const std::string &n : e->parameterNames())
      if (std::find(names.begin(), names.end(), n) == names.end()) {
        names.push_back(n);
        owner.push_back(e);
      }
  std::vector<HostTensor> values(names.size());
  std::vector<std::pair<std::string, const HostTensor *>> arrays;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!owner[i]->parameter(names[i], values[i], err))
      return ctx.fail(err);
    arrays.push_back({names[i], &values[i]});
  }
  // Pipeline parallelism: each stage's first rank hands its weights to the
  // writer (a parameter several stages hold is written once).
  std::vector<std::pair<std::string, HostTensor>> received;
  if (ctx.stages > 1 && !exchangeStageWeights(ctx, arrays, received, err))
    return ctx.fail(err);
  for (auto &[name, t] : received) {
    bool have = false;
    for (auto &a : arrays)
      have |= a.first == name;
    if (!have)
      arrays.push_back({name, &t});
  }
  bool ok = !ctx.lead ||
            (endsWith(path, ".onnx")
                 ? writeOnnxWithWeights(ctx.info.weightsFile, path, arrays, err)
             : endsWith(path, ".safetensors")
                 ? writeSafetensors(path, arrays, err)
                 : writeNpz(path, arrays, err));
  return ok || ctx.fail(err);
}

} // namespace ds::rt

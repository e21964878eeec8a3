//===- Checkpoint.h - sharded checkpoints -----------------------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A checkpoint is a folder DIR/step-NNNNNNNN holding one file per rank
// (rank-RRRRR.npz: every parameter, buffer and optimizer-state tensor as
// that rank stores it, ZeRO shards included) and manifest.txt (the plan's
// checksum, world size, stage, step, each shard file's size and FNV-1a 64
// checksum, and every tensor's kind and whole shape). DIR/latest names the
// newest complete one. Every file is written to a temporary name, synced
// and renamed; `latest` changes last, so an interrupted save leaves the
// previous checkpoint in force. See docs/parallel.md.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CHECKPOINT_H
#define DS_RUNTIME_CHECKPOINT_H

#include "ds/Runtime/Runtime.h"

#include <map>
#include <string>

namespace ds::rt {

class Communicator;

/// Saves the state after `step` optimizer steps. Collective: every rank
/// calls it; false with `err` on a rank whose part failed (the result is
/// the same on every rank: a save is complete everywhere or nowhere).
/// `extra` (the loss scaler's state, ...) goes into the manifest.
bool saveCheckpoint(const std::string &dir, Executor &exec, Communicator &comm,
                    const PlanInfo &info, int64_t step,
                    const std::map<std::string, std::string> &extra,
                    std::string &err);

/// Loads this rank's shard of the checkpoint in `dir` (its `latest`, or a
/// step folder given directly) after checking it belongs to this plan and
/// that the shard is intact; sets `step` to the steps it had completed. A
/// checkpoint of the same model and optimizer compiled for another world
/// size or ZeRO stage is re-partitioned (every shard file is read and each
/// tensor cut by this plan's partition; `repartitioned` says so). Local:
/// the caller agrees over ranks (allOk).
bool loadCheckpoint(const std::string &dir, Executor &exec, int rank,
                    const PlanInfo &info, int64_t &step, bool &repartitioned,
                    std::map<std::string, std::string> &extra,
                    std::string &err);

/// Loads this rank's part of a checkpoint saved with another pipeline
/// layout: a pipeline's DIR/stage-K folders (any number of stages or model
/// chunks), or one checkpoint without stages, resumed by a plan of another
/// stage count (or none). Every tensor the plan holds is rebuilt whole from
/// the stage that has it (a tied weight from the first), checked by kind,
/// type and shape, and cut by this plan's partition; a gradient
/// accumulator the checkpoint lacks starts at zero (it is zero between
/// steps). Every stage must be at the same step. Local, like
/// loadCheckpoint.
bool loadPipelineCheckpoint(const std::string &dir, Executor &exec, int rank,
                            const PlanInfo &info, int64_t &step,
                            std::map<std::string, std::string> &extra,
                            std::string &err);

/// The number of DIR/stage-K folders (0: not a pipeline's checkpoint).
int pipelineCheckpointStages(const std::string &dir);

/// Merges the shards of the checkpoint in `dir` into whole fp32 (as
/// stored) parameters and writes them to `out` (.safetensors or .npz),
/// like DeepSpeed's zero_to_fp32. Needs no plan and no MPI.
bool consolidateCheckpoint(const std::string &dir, const std::string &out,
                           bool withState, std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_CHECKPOINT_H

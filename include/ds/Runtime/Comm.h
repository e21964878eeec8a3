//===- Comm.h - communicators for collectives ------------------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM). The interface the MPI
// (CPU) implementation fills today and NCCL (GPU) later.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_COMM_H
#define DS_RUNTIME_COMM_H

#include "ds/Runtime/Runtime.h"

#include <cstring>
#include <memory>
#include <string>

namespace ds::rt {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place all-reduce of `count` elements; `mean` divides the sum by
  /// the number of ranks.
  virtual bool allReduce(void *data, int64_t count, DType dtype, bool mean,
                         std::string &err) = 0;
  /// Every rank's `count` elements of `input`, in rank order, into
  /// `output` (size() * count elements).
  virtual bool allGather(const void *input, void *output, int64_t count,
                         DType dtype, std::string &err) = 0;
  /// The sum (or mean) over ranks of `input` (size() * count elements);
  /// rank r keeps elements [r*count, (r+1)*count) in `output`.
  virtual bool reduceScatter(const void *input, void *output, int64_t count,
                             DType dtype, bool mean, std::string &err) = 0;
  /// Asynchronous collectives (a plan's `async` kernels): start returns a
  /// handle, finish waits for it and applies the mean. Until finish, the
  /// buffers belong to the communication. All-reduce works in place on
  /// `output` (which holds the local contribution).
  enum class Kind { AllReduce, AllGather, ReduceScatter };
  virtual bool start(Kind kind, const void *input, void *output,
                     int64_t count, DType dtype, bool mean, int &handle,
                     std::string &err) = 0;
  virtual bool finish(int handle, std::string &err) = 0;
  /// Lets started collectives progress (called between kernels).
  virtual void progress() {}
  /// Logical AND of `ok` over all ranks (for errors every rank must see).
  virtual bool allOk(bool ok) = 0;
  /// Ends every rank with `code` (after an error on one rank, so that the
  /// others do not wait in a collective forever).
  [[noreturn]] virtual void abort(int code) = 0;
  /// The ranks of the same `color` as a communicator of their own, ordered
  /// by `key` (MPI_Comm_split): a data- or tensor-parallel group.
  virtual std::unique_ptr<Communicator> split(int color, int key,
                                              std::string &err) = 0;

  /// Point to point, for pipeline parallelism. `send` copies the bytes and
  /// returns at once (so that two stages sending to each other cannot
  /// deadlock); `recv` blocks until the peer's bytes with the same tag
  /// arrive and fails if their size differs; `flushSends` waits until every
  /// send has been delivered.
  virtual bool send(const void *data, uint64_t bytes, int peer, int tag,
                    std::string &err) {
    err = "point-to-point send needs MPI (start with mpirun)";
    return false;
  }
  virtual bool recv(void *data, uint64_t bytes, int peer, int tag,
                    std::string &err) {
    err = "point-to-point receive needs MPI (start with mpirun)";
    return false;
  }
  virtual bool flushSends(std::string &err) { return true; }

  /// `bytes` of `data` from rank `root` to every rank (calibration measures
  /// it; one rank has nothing to send).
  virtual bool broadcast(void *data, uint64_t bytes, int root,
                         std::string &err) {
    if (size() == 1)
      return true;
    err = "broadcast needs MPI (start with mpirun)";
    return false;
  }

  /// All-to-all of raw bytes: rank r's `input` holds size() blocks of
  /// `bytesPerRank`, block j for rank j; `output` receives block r of
  /// every rank, in rank order (1-bit Adam's packed signs).
  virtual bool allToAll(const void *input, void *output, uint64_t bytesPerRank,
                        std::string &err) {
    if (size() == 1) {
      std::memcpy(output, input, bytesPerRank);
      return true;
    }
    err = "all-to-all needs MPI (start with mpirun)";
    return false;
  }

  /// Bytes handed to collectives since creation: each call adds the bytes
  /// of the buffer it reduces or fills (all-reduce: the tensor; all-gather:
  /// the gathered output; reduce-scatter: the input). ds-run compares it
  /// with the plan's figure.
  uint64_t collectiveBytes = 0;
};

/// MPI's world when the process was started by mpirun (or another MPI
/// launcher), else a communicator of one rank. Finalizes MPI on destruction.
std::unique_ptr<Communicator> createCommunicator(std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_COMM_H

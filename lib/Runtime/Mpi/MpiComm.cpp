//===- MpiComm.cpp - the MPI communicator ---------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Comm.h"

#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace ds::rt {
namespace {

class SingleComm : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool allReduce(void *, int64_t, DType, bool, std::string &) override {
    return true;
  }
  bool allGather(const void *input, void *output, int64_t count, DType dtype,
                 std::string &) override {
    std::memcpy(output, input, count * dtypeSize(dtype));
    return true;
  }
  bool reduceScatter(const void *input, void *output, int64_t count,
                     DType dtype, bool, std::string &) override {
    std::memcpy(output, input, count * dtypeSize(dtype));
    return true;
  }
  bool start(Kind kind, const void *input, void *output, int64_t count,
             DType dtype, bool, int &handle, std::string &) override {
    if (kind != Kind::AllReduce)
      std::memcpy(output, input, count * dtypeSize(dtype));
    handle = 0;
    return true;
  }
  bool finish(int, std::string &) override { return true; }
  bool allOk(bool ok) override { return ok; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

class MpiComm : public Communicator {
public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool allReduce(void *data, int64_t count, DType dtype, bool mean,
                 std::string &err) override {
    if (dtype != DType::F32) {
      err = std::string("all_reduce of ") + dtypeName(dtype) +
            " is not supported yet (f32)";
      return false;
    }
    if (MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
      err = "MPI_Allreduce failed";
      return false;
    }
    if (mean) {
      float *f = static_cast<float *>(data);
      float inv = 1.0f / static_cast<float>(size_);
      for (int64_t i = 0; i < count; ++i)
        f[i] *= inv;
    }
    return true;
  }
  bool allGather(const void *input, void *output, int64_t count, DType dtype,
                 std::string &err) override {
    if (!checkCount(count, err))
      return false;
    int bytes = static_cast<int>(count * dtypeSize(dtype));
    if (MPI_Allgather(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE,
                      MPI_COMM_WORLD) != MPI_SUCCESS) {
      err = "MPI_Allgather failed";
      return false;
    }
    return true;
  }
  bool reduceScatter(const void *input, void *output, int64_t count,
                     DType dtype, bool mean, std::string &err) override {
    if (dtype != DType::F32) {
      err = std::string("reduce_scatter of ") + dtypeName(dtype) +
            " is not supported yet (f32)";
      return false;
    }
    if (!checkCount(count, err))
      return false;
    if (MPI_Reduce_scatter_block(input, output, static_cast<int>(count),
                                 MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD) != MPI_SUCCESS) {
      err = "MPI_Reduce_scatter_block failed";
      return false;
    }
    if (mean) {
      float *f = static_cast<float *>(output);
      float inv = 1.0f / static_cast<float>(size_);
      for (int64_t i = 0; i < count; ++i)
        f[i] *= inv;
    }
    return true;
  }
  bool start(Kind kind, const void *input, void *output, int64_t count,
             DType dtype, bool mean, int &handle, std::string &err) override {
    if (kind != Kind::AllGather && dtype != DType::F32) {
      err = std::string("reductions of ") + dtypeName(dtype) +
            " are not supported yet (f32)";
      return false;
    }
    if (!checkCount(count, err))
      return false;
    Pending p;
    int rc = MPI_SUCCESS;
    int n = static_cast<int>(count);
    switch (kind) {
    case Kind::AllReduce:
      rc = MPI_Iallreduce(MPI_IN_PLACE, output, n, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD, &p.request);
      break;
    case Kind::AllGather: {
      int bytes = static_cast<int>(count * dtypeSize(dtype));
      rc = MPI_Iallgather(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE,
                          MPI_COMM_WORLD, &p.request);
      break;
    }
    case Kind::ReduceScatter:
      rc = MPI_Ireduce_scatter_block(input, output, n, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD, &p.request);
      break;
    }
    if (rc != MPI_SUCCESS) {
      err = "starting an MPI collective failed";
      return false;
    }
    if (mean && kind != Kind::AllGather) {
      p.scale = static_cast<float *>(output);
      p.count = count;
    }
    handle = static_cast<int>(pending_.size());
    pending_.push_back(p);
    return true;
  }
  bool finish(int handle, std::string &err) override {
    if (handle < 0 || handle >= static_cast<int>(pending_.size()) ||
        pending_[handle].done) {
      err = "wait for a collective that is not in flight";
      return false;
    }
    Pending &p = pending_[handle];
    if (MPI_Wait(&p.request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      err = "MPI_Wait failed";
      return false;
    }
    p.done = true;
    if (p.scale) {
      float inv = 1.0f / static_cast<float>(size_);
      for (int64_t i = 0; i < p.count; ++i)
        p.scale[i] *= inv;
    }
    // Handles are reused once every started collective has finished.
    bool all = true;
    for (const Pending &q : pending_)
      all &= q.done;
    if (all)
      pending_.clear();
    return true;
  }
  void progress() override {
    for (Pending &p : pending_) {
      if (p.done || p.tested)
        continue;
      int flag = 0;
      MPI_Test(&p.request, &flag, MPI_STATUS_IGNORE);
      if (flag)
        p.tested = true; // complete: MPI_Wait returns at once
    }
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }
  bool allOk(bool ok) override {
    int local = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
  }

private:
  // MPI counts are ints: larger collectives are refused, not truncated.
  static bool checkCount(int64_t count, std::string &err) {
    if (count * 8 <= INT32_MAX)
      return true;
    err = "a collective of " + std::to_string(count) +
          " elements exceeds MPI's int count";
    return false;
  }
  int rank_ = 0, size_ = 1;
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    float *scale = nullptr; // the mean's output, scaled at finish
    int64_t count = 0;
    bool done = false, tested = false;
  };
  std::vector<Pending> pending_;
};

bool launchedByMpi() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var))
      return true;
  return false;
}

} // namespace

std::unique_ptr<Communicator> createCommunicator(std::string &err) {
  if (!launchedByMpi())
    return std::make_unique<SingleComm>();
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) {
    err = "MPI_Init failed";
    return nullptr;
  }
  return std::make_unique<MpiComm>();
}

} // namespace ds::rt

//===- MpiComm.cpp - the MPI communicator ---------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Comm.h"
#include "../Cpu/Kernels.h"

#include <mpi.h>
#include <climits>
#include <list>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace ds::rt {
namespace {

// 16-bit float sums for MPI: the data travel as 16-bit words, each pair
// is added in f32 and rounded back (as NCCL does for half types).
template <DType T>
void sum16(void *in, void *inout, int *len, MPI_Datatype *) {
  for (int i = 0; i < *len; ++i)
    storeD(inout, T, i, static_cast<float>(loadD(in, T, i)) +
                            static_cast<float>(loadD(inout, T, i)));
}

/// The MPI datatype and sum op of a float dtype; false for others.
bool reduction(DType dtype, MPI_Datatype &type, MPI_Op &op) {
  static MPI_Op f16 = MPI_OP_NULL, bf16 = MPI_OP_NULL;
  switch (dtype) {
  case DType::F32:
    type = MPI_FLOAT;
    op = MPI_SUM;
    return true;
  case DType::F16:
    if (f16 == MPI_OP_NULL)
      MPI_Op_create(&sum16<DType::F16>, 1, &f16);
    type = MPI_UINT16_T;
    op = f16;
    return true;
  case DType::BF16:
    if (bf16 == MPI_OP_NULL)
      MPI_Op_create(&sum16<DType::BF16>, 1, &bf16);
    type = MPI_UINT16_T;
    op = bf16;
    return true;
  default:
    return false;
  }
}

/// Divides `count` elements by `n` in place (the mean of a sum).
void scaleBy(void *data, DType dtype, int64_t count, int n) {
  double inv = 1.0 / n;
  for (int64_t i = 0; i < count; ++i)
    storeD(data, dtype, i,
           static_cast<float>(loadD(data, dtype, i) * static_cast<float>(inv)));
}

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
  std::unique_ptr<Communicator> split(int, int, std::string &) override {
    return std::make_unique<SingleComm>();
  }
};

class MpiComm : public Communicator {
public:
  explicit MpiComm(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD) { // a group: freed, MPI stays up
      if (!finalized)
        MPI_Comm_free(&comm_);
      return;
    }
    if (!finalized)
      MPI_Finalize();
  }
  std::unique_ptr<Communicator> split(int color, int key,
                                      std::string &err) override {
    MPI_Comm sub;
    if (MPI_Comm_split(comm_, color, key, &sub) != MPI_SUCCESS) {
      err = "MPI_Comm_split failed";
      return nullptr;
    }
    return std::make_unique<MpiComm>(sub);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool allReduce(void *data, int64_t count, DType dtype, bool mean,
                 std::string &err) override {
    MPI_Datatype type;
    MPI_Op op;
    if (!reduction(dtype, type, op)) {
      err = std::string("all_reduce of ") + dtypeName(dtype) +
            " is not supported (float types)";
      return false;
    }
    if (!checkCount(count, err))
      return false;
    if (MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), type, op,
                      comm_) != MPI_SUCCESS) {
      err = "MPI_Allreduce failed";
      return false;
    }
    if (mean)
      scaleBy(data, dtype, count, size_);
    return true;
  }
  bool allGather(const void *input, void *output, int64_t count, DType dtype,
                 std::string &err) override {
    if (!checkCount(count, err))
      return false;
    int bytes = static_cast<int>(count * dtypeSize(dtype));
    if (MPI_Allgather(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE,
                      comm_) != MPI_SUCCESS) {
      err = "MPI_Allgather failed";
      return false;
    }
    return true;
  }
  bool allToAll(const void *input, void *output, uint64_t bytesPerRank,
                std::string &err) override {
    if (!checkCount(static_cast<int64_t>(bytesPerRank), err))
      return false;
    int bytes = static_cast<int>(bytesPerRank);
    if (MPI_Alltoall(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE,
                     comm_) != MPI_SUCCESS) {
      err = "MPI_Alltoall failed";
      return false;
    }
    return true;
  }
  bool reduceScatter(const void *input, void *output, int64_t count,
                     DType dtype, bool mean, std::string &err) override {
    MPI_Datatype type;
    MPI_Op op;
    if (!reduction(dtype, type, op)) {
      err = std::string("reduce_scatter of ") + dtypeName(dtype) +
            " is not supported (float types)";
      return false;
    }
    if (!checkCount(count, err))
      return false;
    if (MPI_Reduce_scatter_block(input, output, static_cast<int>(count), type,
                                 op, comm_) != MPI_SUCCESS) {
      err = "MPI_Reduce_scatter_block failed";
      return false;
    }
    if (mean)
      scaleBy(output, dtype, count, size_);
    return true;
  }
  bool start(Kind kind, const void *input, void *output, int64_t count,
             DType dtype, bool mean, int &handle, std::string &err) override {
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    if (kind != Kind::AllGather && !reduction(dtype, type, op)) {
      err = std::string("reductions of ") + dtypeName(dtype) +
            " are not supported (float types)";
      return false;
    }
    if (!checkCount(count, err))
      return false;
    Pending p;
    int rc = MPI_SUCCESS;
    int n = static_cast<int>(count);
    switch (kind) {
    case Kind::AllReduce:
      rc = MPI_Iallreduce(MPI_IN_PLACE, output, n, type, op, comm_,
                          &p.request);
      break;
    case Kind::AllGather: {
      int bytes = static_cast<int>(count * dtypeSize(dtype));
      rc = MPI_Iallgather(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE,
                          comm_, &p.request);
      break;
    }
    case Kind::ReduceScatter:
      rc = MPI_Ireduce_scatter_block(input, output, n, type, op,
                                     comm_, &p.request);
      break;
    }
    if (rc != MPI_SUCCESS) {
      err = "starting an MPI collective failed";
      return false;
    }
    if (mean && kind != Kind::AllGather) {
      p.scale = output;
      p.count = count;
      p.dtype = dtype;
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
    if (p.scale)
      scaleBy(p.scale, p.dtype, p.count, size_);
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
  bool send(const void *data, uint64_t bytes, int peer, int tag,
            std::string &err) override {
    if (!fitsInt(bytes, err))
      return false;
    reap();
    sends_.emplace_back();
    PendingSend &p = sends_.back();
    p.bytes.assign(static_cast<const char *>(data),
                   static_cast<const char *>(data) + bytes);
    if (MPI_Isend(p.bytes.data(), static_cast<int>(bytes), MPI_BYTE, peer, tag,
                  comm_, &p.request) != MPI_SUCCESS) {
      sends_.pop_back();
      err = "MPI_Isend to rank " + std::to_string(peer) + " failed";
      return false;
    }
    return true;
  }
  bool recv(void *data, uint64_t bytes, int peer, int tag,
            std::string &err) override {
    if (!fitsInt(bytes, err))
      return false;
    reap();
    MPI_Status status;
    if (MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_,
                 &status) != MPI_SUCCESS) {
      err = "MPI_Recv from rank " + std::to_string(peer) + " failed";
      return false;
    }
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (static_cast<uint64_t>(got) != bytes) {
      err = "rank " + std::to_string(peer) + " sent " + std::to_string(got) +
            " bytes, this stage expected " + std::to_string(bytes) +
            " (the ranks run different plans?)";
      return false;
    }
    return true;
  }
  bool broadcast(void *data, uint64_t bytes, int root,
                 std::string &err) override {
    if (!fitsInt(bytes, err))
      return false;
    if (MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_) !=
        MPI_SUCCESS) {
      err = "MPI_Bcast from rank " + std::to_string(root) + " failed";
      return false;
    }
    return true;
  }
  bool flushSends(std::string &err) override {
    for (PendingSend &p : sends_)
      if (MPI_Wait(&p.request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        err = "a pipeline send did not complete";
        return false;
      }
    sends_.clear();
    return true;
  }
  bool allOk(bool ok) override {
    int local = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, comm_);
    return all == 1;
  }

private:
  // Sends in flight, with their own copy of the bytes.
  struct PendingSend {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::list<PendingSend> sends_;
  static bool fitsInt(uint64_t bytes, std::string &err) {
    if (bytes <= static_cast<uint64_t>(INT_MAX))
      return true;
    err = "a pipeline message of " + std::to_string(bytes) +
          " bytes is more than MPI's int count";
    return false;
  }
  void reap() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? sends_.erase(it) : std::next(it);
    }
  }
  // MPI counts are ints: larger collectives are refused, not truncated.
  static bool checkCount(int64_t count, std::string &err) {
    if (count * 8 <= INT32_MAX)
      return true;
    err = "a collective of " + std::to_string(count) +
          " elements exceeds MPI's int count";
    return false;
  }
  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0, size_ = 1;
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    void *scale = nullptr; // the mean's output, scaled at finish
    int64_t count = 0;
    DType dtype = DType::F32;
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

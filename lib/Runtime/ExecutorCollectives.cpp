//===- ExecutorCollectives.cpp - the executor's collective groups --------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A collective names its group: every rank, the data-parallel ranks (same
// tensor-parallel index) or the tensor-parallel ranks (same data-parallel
// index), rank = dp * T + tp, or (ZeRO++'s hpZ) the hpz_partition_size
// consecutive ranks of this rank's node. The groups' byte counters feed
// the world's.
// A whole parameter is gathered from the ZeRO shards and tensor-parallel
// slices of the ranks that hold it.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"
#include "TpSlice.h"

#include <cstring>

namespace ds::rt {

Communicator *Executor::Impl::group(int64_t g) const {
  if (g == -1) // every rank
    return options.comm;
  if (g == 1 && tpComm)
    return tpComm.get();
  if (g == 0 && dpComm)
    return dpComm.get();
  if (g == 2 && nodeComm)
    return nodeComm.get();
  return options.comm;
}

int Executor::Impl::groupOf(const Attrs &attrs) {
  int64_t g = attrs.getInt("group", 0);
  return g == -1 || g == 1 || g == 2 ? static_cast<int>(g) : 0;
}

void Executor::Impl::collectBytes() {
  for (Communicator *c : {dpComm.get(), tpComm.get(), nodeComm.get()})
    if (c && options.comm) {
      options.comm->collectiveBytes += c->collectiveBytes;
      c->collectiveBytes = 0;
    }
}

void Executor::Impl::progressCollectives() {
  for (int g = -1; g <= 2; ++g)
    if (!inflight[g + 1].empty())
      group(g)->progress();
}

bool Executor::Impl::formNodeGroup(std::string &err) {
  int h = static_cast<int>(p().hpz_partition_size());
  if (h <= 1)
    return true;
  int world = options.comm ? options.comm->size() : 1;
  if (options.backend == "cuda") {
    err = "this plan uses ZeRO++'s hpZ (--hpz-partition-size), which the "
          "CUDA backend does not run yet; run it with --backend=cpu";
    return false;
  }
  if (world % h) {
    err = "this plan's hpZ partition size " + std::to_string(h) +
          " does not divide the " + std::to_string(world) + " ranks running";
    return false;
  }
  if (!options.comm)
    return true;
  int rank = options.comm->rank();
  if (!(nodeComm = options.comm->split(rank / h, rank % h, err))) {
    if (err.empty())
      err = "cannot form hpZ's node groups";
    return false;
  }
  return true;
}

bool Executor::Impl::formGroups(std::string &err) {
  if (!formNodeGroup(err))
    return false;
  uint32_t tp = p().tensor_parallel();
  if (tp <= 1 || !options.comm)
    return true;
  if (options.backend == "cuda") {
    err = "this plan is tensor-parallel, which the CUDA backend does not "
          "run yet; run it with --backend=cpu";
    return false;
  }
  int rank = options.comm->rank();
  if (options.comm->size() % static_cast<int>(tp) ||
      !(dpComm = options.comm->split(rank % tp, rank / tp, err)) ||
      !(tpComm = options.comm->split(rank / tp, rank % tp, err))) {
    if (err.empty())
      err = "cannot form the tensor-parallel groups";
    return false;
  }
  return true;
}

void Executor::Impl::findLossInstruction() {
  const plan::Plan &pp = p();
  if (pp.loss().empty())
    return;
  const plan::Program &prog = pp.programs(0);
  for (const plan::Value &v : pp.outputs()) {
    if (v.name() != pp.loss())
      continue;
    uint32_t id = v.buffer();
    for (int pass = 0; pass < 2; ++pass) {
      int writer = -1;
      for (int i = 0; i < prog.instructions_size(); ++i)
        for (uint32_t o : prog.instructions(i).outputs())
          if (o == id)
            writer = i;
      if (writer < 0)
        break;
      const plan::Instruction &w = prog.instructions(writer);
      lossInstruction = writer;
      if (w.kernel() != "all_reduce" || w.inputs_size() != 1)
        break;
      id = w.inputs(0);
    }
  }
}

bool Executor::parameter(const std::string &name, HostTensor &out,
                         std::string &err) const {
  const plan::Plan &p = impl->p();
  for (int i = 0; i < p.parameters_size(); ++i) {
    if (p.parameters(i).name() != name)
      continue;
    // A 16-bit parameter's value is its f32 master copy's.
    if (int m = impl->masterOf(i); m >= 0)
      i = m;
    if (!impl->pullParams(err))
      return false;
    const plan::Parameter &param = p.parameters(i);
    out.dtype = toDType(param.dtype());
    size_t es = dtypeSize(out.dtype);
    // This rank's tensor: whole, or rebuilt from the data-parallel group's
    // ZeRO shards (padding dropped).
    std::vector<unsigned char> mine;
    std::vector<int64_t> shape;
    if (!param.sharded()) {
      shape.assign(param.shape().begin(), param.shape().end());
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      mine.assign(impl->paramPtr[i], impl->paramPtr[i] + n * es);
    } else {
      Communicator *comm = impl->group(0);
      int world = comm ? comm->size() : 1;
      size_t shardBytes = param.shape(0) * es;
      mine.resize(shardBytes * world);
      if (world == 1)
        std::memcpy(mine.data(), impl->paramPtr[i], shardBytes);
      else if (!comm->allGather(impl->paramPtr[i], mine.data(), param.shape(0),
                                out.dtype, err))
        return false;
      shape.assign(param.full_shape().begin(), param.full_shape().end());
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      mine.resize(n * es);
    }
    auto [axis, parts, blocks, tpTotal] = impl->tpSplitOf(i);
    if (parts <= 1) {
      out.shape = shape;
      out.data = std::move(mine);
      return true;
    }
    // Tensor parallelism: every rank's slice of the group, joined along the
    // axis (tensor-parallel rank r holds slice r).
    Communicator *comm = impl->group(1);
    if (!comm || comm->size() != parts) {
      err = "'" + name + "' is split over " + std::to_string(parts) +
            " tensor-parallel ranks, not the " +
            std::to_string(comm ? comm->size() : 1) + " running";
      return false;
    }
    int64_t n = static_cast<int64_t>(mine.size() / es);
    std::vector<unsigned char> all(mine.size() * parts);
    if (!comm->allGather(mine.data(), all.data(), n, out.dtype, err))
      return false;
    shape[axis] = tpTotal > 0 ? tpTotal : shape[axis] * parts;
    out.shape = shape;
    TpLayout layout(shape, axis, parts, blocks);
    out.data.resize(static_cast<size_t>(layout.outer * layout.total *
                                        layout.inner) *
                    es);
    for (int r = 0; r < parts; ++r)
      layout.join(all.data() + static_cast<size_t>(r) * n * es,
                  out.data.data(), r, es);
    return true;
  }
  err = "'" + name + "' is not a parameter of the plan";
  return false;
}

} // namespace ds::rt

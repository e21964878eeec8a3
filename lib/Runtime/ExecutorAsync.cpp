//===- ExecutorAsync.cpp - hazards of asynchronous work -------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Three kinds of work run behind the instruction stream: collectives
// started and waited for by the plan, copies between device and host on
// the device's copy stream (CUDA offload), and NVMe reads and writes
// (io_uring). Before an instruction runs, the executor waits for the
// transfers whose bytes it reads or writes; a run that stops early drains
// all of them.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

namespace ds::rt {

bool Executor::Impl::awaitNvme(const KernelContext &ctx, std::string &err) {
  if (!nvme || nvme->pending().empty())
    return true;
  auto touches = [&](const TensorView &v) {
    auto *b = static_cast<const unsigned char *>(v.data);
    auto *e = b + v.numel() * dtypeSize(v.dtype);
    for (const NvmeStore::Pending &q : nvme->pending())
      if (b && q.begin < e && b < q.end)
        return q.ticket;
    return 0;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (const TensorView &v : pass ? ctx.out : ctx.in)
      for (int t; (t = touches(v)) != 0;)
        if (!nvme->wait(t, err))
          return false;
  return true;
}

bool Executor::Impl::isNvmeTransfer(const plan::Instruction &ins) const {
  if (!isTransfer(ins))
    return false;
  bool nvmeIo = false;
  for (uint32_t id : {ins.inputs(0), ins.outputs(0)}) {
    const plan::Buffer &b = p().buffers(id);
    nvmeIo |= b.space() == plan::PARAM && nvmeSlot[b.slot()] >= 0;
  }
  return nvmeIo;
}

bool Executor::Impl::awaitCopies(const plan::Instruction &ins,
                                 const KernelContext &ctx, bool nvmeIo,
                                 std::string &err) {
  // Copies after copies are ordered on the copy stream.
  if (!device || copies.empty() || (isTransfer(ins) && !nvmeIo))
    return true;
  bool hostSide = ins.on_host() || nvmeIo;
  auto range = [](const TensorView &v) {
    auto *b = static_cast<const unsigned char *>(v.data);
    return std::make_pair(b, b + (b ? v.numel() * dtypeSize(v.dtype) : 0));
  };
  auto hits = [](std::pair<const unsigned char *, const unsigned char *> r,
                 const unsigned char *b, const unsigned char *e) {
    return r.first && r.first < e && b < r.second;
  };
  for (size_t c = 0; c < copies.size();) {
    const PendingCopy &pc = copies[c];
    bool wait = false;
    for (const TensorView &v : ctx.in)
      wait |= hits(range(v), pc.dst, pc.dstEnd);
    for (const TensorView &v : ctx.out)
      wait |= hits(range(v), pc.dst, pc.dstEnd) ||
              hits(range(v), pc.src, pc.srcEnd);
    if (!wait) {
      ++c;
      continue;
    }
    if (!device->waitCopy(pc.handle, hostSide, err))
      return false;
    copies.erase(copies.begin() + static_cast<long>(c));
  }
  return true;
}

bool Executor::Impl::startTransfer(const plan::Instruction &ins,
                                   const KernelContext &ctx, bool nvmeIo,
                                   RunStats &stats, bool &handled,
                                   std::string &err) {
  handled = false;
  if (device && !nvmeIo) {
    int handle;
    const TensorView &from = ctx.in[0];
    uint64_t bytes = from.numel() * dtypeSize(from.dtype);
    if (!device->copyAsync(ctx.out[0].data, from.data, bytes, handle, err))
      return false;
    auto *s = static_cast<const unsigned char *>(from.data);
    auto *d = static_cast<const unsigned char *>(ctx.out[0].data);
    copies.push_back({handle, s, s + bytes, d, d + bytes});
  }
  const plan::Buffer &from = p().buffers(ins.inputs(0));
  const plan::Buffer &to = p().buffers(ins.outputs(0));
  auto nvmeSlotOf = [&](const plan::Buffer &b) {
    return b.space() == plan::PARAM ? nvmeSlot[b.slot()] : -1;
  };
  int readSlot = nvmeSlotOf(from), writeSlot = nvmeSlotOf(to);
  int ticket;
  uint64_t bytes = from.bytes();
  if (readSlot >= 0) {
    if (!nvme->read(readSlot, ctx.out[0].data, bytes, ticket, err))
      return false;
    stats.nvmeReadBytes += bytes;
    handled = true;
  } else if (writeSlot >= 0) {
    if (!nvme->write(writeSlot, ctx.in[0].data, bytes, ticket, err))
      return false;
    stats.nvmeWriteBytes += bytes;
    handled = true;
  } else if (to.space() == plan::HOST_ARENA ||
             (to.space() == plan::PARAM &&
              p().parameters(to.slot()).location() == plan::HOST)) {
    stats.toHostBytes += bytes;
  } else {
    stats.toDeviceBytes += bytes;
  }
  if (device && !nvmeIo)
    handled = true;
  return true;
}

bool Executor::Impl::drain(std::string &err) {
  for (int g = -1; g <= 2; ++g) {
    for (auto &[key, handle] : inflight[g + 1])
      if (!device && options.comm && !group(g)->finish(handle, err))
        return false;
    inflight[g + 1].clear();
  }
  if (nvme && !nvme->waitAll(err))
    return false;
  return !device || (device->synchronize(err) && dropCopies(err));
}

bool Executor::Impl::dropCopies(std::string &err) {
  for (const PendingCopy &c : copies)
    if (!device->waitCopy(c.handle, true, err))
      return false;
  copies.clear();
  return true;
}

} // namespace ds::rt

//===- ExecutorMemory.cpp - arenas, buffers and parameter storage ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The arena and host arena are allocated once at the plan's sizes; every
// buffer resolves to an address in its memory space (arena, host arena,
// parameters, inputs, constants), on the device for the CUDA backend.
// Parameters live on the device, the host or NVMe; NVMe ones get a host
// copy (the shadow) only while loading, checkpointing or resuming.
// Pipeline stages keep a micro-batch's forward state aside (the stash).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <cstring>

namespace ds::rt {

AlignedBlock alignedAlloc(uint64_t bytes) {
  if (bytes > (uint64_t(1) << 60)) // no machine has it; the rounding below
    return AlignedBlock();         // must not wrap
  uint64_t size = (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64;
  return AlignedBlock(static_cast<unsigned char *>(std::aligned_alloc(64, size)));
}

Executor::Impl::~Impl() {
  if (device) {
    std::string ignored;
    device->synchronize(ignored);
    for (void *p : pinned)
      device->unpinHost(p);
  }
}

bool Executor::Impl::allocateArenas(std::string &err) {
  const plan::Program &prog = p().programs(0);
  arena = alignedAlloc(prog.arena_bytes());
  if (!arena) {
    err = "cannot allocate the arena of " + std::to_string(prog.arena_bytes()) +
          " bytes";
    return false;
  }
  hostArena = alignedAlloc(prog.host_arena_bytes());
  if (!hostArena) {
    err = "cannot allocate the host arena of " +
          std::to_string(prog.host_arena_bytes()) + " bytes";
    return false;
  }
  for (const plan::Instruction &ins : prog.instructions())
    for (uint32_t id : ins.outputs()) {
      const plan::Buffer &b = p().buffers(id);
      if (b.space() == plan::ARENA)
        arenaHighWater =
            std::max<uint64_t>(arenaHighWater, b.offset() + b.bytes());
      if (b.space() == plan::HOST_ARENA)
        hostArenaHighWater =
            std::max<uint64_t>(hostArenaHighWater, b.offset() + b.bytes());
    }
  return true;
}

std::unique_ptr<DeviceBlock> Executor::Impl::deviceAlloc(uint64_t bytes,
                                                         std::string &err) {
  auto b = std::make_unique<DeviceBlock>();
  b->ptr = device->allocate(bytes, err);
  if (!b->ptr)
    return nullptr;
  b->device = device.get();
  return b;
}

bool Executor::Impl::openDevice(std::string &err) {
  device = openCudaDevice(err);
  if (!device)
    return false;
  std::vector<std::string> missing;
  const plan::Program &prog = p().programs(0);
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const std::string &k = prog.instructions(i).kernel();
    if (prog.instructions(i).on_host())
      continue; // a host kernel: the CPU's, on host memory
    const KernelInfo *dk = device->kernel(k);
    if (!dk) {
      if (std::find(missing.begin(), missing.end(), k) == missing.end())
        missing.push_back(k);
      continue;
    }
    kernels[i] = dk;
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string &k : missing)
      list += (list.empty() ? "" : ", ") + k;
    err = "the plan needs kernel(s) " + list +
          " that the CUDA backend does not have yet (it has " +
          std::to_string(device->kernelNames().size()) + " of " +
          std::to_string(kernelNames().size()) +
          "); run it with --backend=cpu";
    return false;
  }
  if (!(deviceArena = deviceAlloc(prog.arena_bytes(), err)) ||
      !(deviceParams = deviceAlloc(paramBytes, err)) ||
      !device->toDevice(deviceParams->ptr, params.get(), paramBytes, err))
    return false;
  // Offload: the host arena and host storage are page-locked, so that
  // the copy stream moves them asynchronously.
  for (auto [ptr, bytes] :
       {std::make_pair(static_cast<void *>(hostArena.get()),
                       static_cast<uint64_t>(prog.host_arena_bytes())),
        std::make_pair(static_cast<void *>(hostParams.get()), hostParamBytes)}) {
    if (!bytes)
      continue;
    if (!device->pinHost(ptr, bytes, err))
      return false;
    pinned.push_back(ptr);
  }
  for (int i = 0; i < p().constants_size(); ++i) {
    const std::string &c = p().constants(i);
    auto b = deviceAlloc(c.size(), err);
    if (!b || (!c.empty() && !device->toDevice(b->ptr, c.data(), c.size(), err)))
      return false;
    deviceConsts.push_back(std::move(b));
  }
  // Inputs: one device buffer each, of the plan's size.
  for (int i = 0; i < p().inputs_size(); ++i) {
    const plan::Buffer &b = p().buffers(p().inputs(i).buffer());
    auto d = deviceAlloc(b.bytes(), err);
    if (!d)
      return false;
    deviceInputs.push_back(std::move(d));
  }
  return true;
}

void *Executor::Impl::pointer(const plan::Buffer &b, bool hostSide) {
  if (device && !hostSide) {
    auto at = [&](void *base) {
      return static_cast<void *>(static_cast<char *>(base) + b.offset());
    };
    switch (b.space()) {
    case plan::ARENA: return at(deviceArena->ptr);
    case plan::HOST_ARENA: return at(hostArena.get());
    case plan::PARAM:
      if (location[b.slot()] == 1)
        return at(paramPtr[b.slot()]);
      if (location[b.slot()] == 2)
        return paramPtr[b.slot()] ? at(paramPtr[b.slot()]) : nullptr;
      return at(static_cast<char *>(deviceParams->ptr) +
                paramOffsets[b.slot()]);
    case plan::INPUT: return at(deviceInputs[b.slot()]->ptr);
    case plan::CONST: return at(deviceConsts[b.slot()]->ptr);
    default: return nullptr;
    }
  }
  switch (b.space()) {
  case plan::ARENA: return arena.get() + b.offset();
  case plan::HOST_ARENA: return hostArena.get() + b.offset();
  case plan::PARAM:
    return paramPtr[b.slot()] ? paramPtr[b.slot()] + b.offset() : nullptr;
  case plan::INPUT: return inputs[b.slot()].data.data() + b.offset();
  case plan::CONST:
    return const_cast<char *>(p().constants(b.slot()).data()) + b.offset();
  default: return nullptr;
  }
}

void Executor::Impl::bindBuffers() {
  bufferPtr.resize(p().buffers_size());
  for (int i = 0; i < p().buffers_size(); ++i)
    bufferPtr[i] = pointer(p().buffers(i));
}

bool Executor::Impl::pushShadow(std::string &err) {
  if (!nvme || !nvmeShadow)
    return true;
  for (size_t i = 0; i < nvmeSlot.size(); ++i) {
    if (nvmeSlot[i] < 0)
      continue;
    int ticket;
    if (!nvme->write(nvmeSlot[i], paramPtr[i], paramSize[i], ticket, err))
      return false;
  }
  if (!nvme->waitAll(err))
    return false;
  nvmeShadow.reset();
  for (size_t i = 0; i < nvmeSlot.size(); ++i)
    if (nvmeSlot[i] >= 0)
      paramPtr[i] = nullptr;
  return true;
}

bool Executor::Impl::pullShadow(std::string &err) {
  if (!nvme || nvmeShadow)
    return true;
  if (!nvme->waitAll(err))
    return false;
  nvmeShadow = alignedAlloc(nvmeBytes);
  if (!nvmeShadow) {
    err = "cannot allocate " + std::to_string(nvmeBytes) +
          " bytes to read the NVMe-offloaded state";
    return false;
  }
  for (size_t i = 0; i < nvmeSlot.size(); ++i) {
    if (nvmeSlot[i] < 0)
      continue;
    paramPtr[i] = nvmeShadow.get() + paramOffsets[i];
    int ticket;
    if (!nvme->read(nvmeSlot[i], paramPtr[i], paramSize[i], ticket, err))
      return false;
  }
  return nvme->waitAll(err);
}

bool Executor::Impl::pullParams(std::string &err) {
  if (!pullShadow(err))
    return false;
  return !device ||
         device->toHost(params.get(), deviceParams->ptr, paramBytes, err);
}

unsigned char *Executor::Impl::spanBase(const ByteRange &r) {
  return (r.space == plan::HOST_ARENA ? hostArena.get() : arena.get()) +
         r.begin;
}

void Executor::Impl::saveStash(int micro) {
  Stashed &st = stash[micro];
  uint64_t total = 0;
  for (const ByteRange &r : stashSpans)
    total += r.end - r.begin;
  if (st.bytes.capacity() < total && !stashPool.empty()) {
    st.bytes = std::move(stashPool.back());
    stashPool.pop_back();
  }
  st.bytes.resize(total);
  uint64_t at = 0;
  for (const ByteRange &r : stashSpans) {
    std::memcpy(st.bytes.data() + at, spanBase(r), r.end - r.begin);
    at += r.end - r.begin;
  }
  st.saved = true;
  stashBytes += total;
  stashHigh = std::max(stashHigh, stashBytes);
}

void Executor::Impl::endMicroBatch(int micro) {
  auto it = stash.find(micro);
  if (it != stash.end() && it->second.saved)
    stashBytes -= it->second.bytes.size();
  if (it != stash.end() && it->second.bytes.capacity() > 0)
    stashPool.push_back(std::move(it->second.bytes));
  stash.erase(micro);
  ++runs;
  if (stepState.overflow)
    ++skipped;
}

void Executor::Impl::restoreStash(int micro) {
  Stashed &st = stash[micro];
  uint64_t at = 0;
  for (const ByteRange &r : stashSpans) {
    std::memcpy(spanBase(r), st.bytes.data() + at, r.end - r.begin);
    at += r.end - r.begin;
  }
}

bool Executor::output(const std::string &name, HostTensor &out,
                      std::string &err) const {
  const plan::Plan &p = impl->p();
  for (const plan::Value &v : p.outputs()) {
    if (v.name() != name)
      continue;
    const plan::Buffer &b = p.buffers(v.buffer());
    out.dtype = toDType(b.dtype());
    out.shape.assign(b.shape().begin(), b.shape().end());
    out.data.resize(b.bytes());
    if (b.bytes() && impl->device)
      return impl->device->toHost(out.data.data(), impl->pointer(b),
                                  b.bytes(), err);
    if (b.bytes())
      std::memcpy(out.data.data(), impl->pointer(b), b.bytes());
    return true;
  }
  err = "'" + name + "' is not an output of the plan";
  return false;
}

bool Executor::commitStorage(std::string &err) {
  if (!impl->pushShadow(err))
    return false;
  return !impl->device ||
         impl->device->toDevice(impl->deviceParams->ptr, impl->params.get(),
                                impl->paramBytes, err);
}

std::string Executor::deviceName() const {
  return impl->device ? impl->device->describe() : "cpu";
}

std::vector<Executor::Storage> Executor::storage() {
  const plan::Plan &p = impl->p();
  std::string pullError;
  if (!impl->pullParams(pullError))
    return {};
  std::vector<Storage> out;
  for (int i = 0; i < p.parameters_size(); ++i) {
    const plan::Parameter &param = p.parameters(i);
    Storage s;
    s.name = param.name();
    s.dtype = toDType(param.dtype());
    s.shape.assign(param.shape().begin(), param.shape().end());
    s.fullShape.assign(param.full_shape().begin(), param.full_shape().end());
    s.sharded = param.sharded();
    s.state = param.state();
    s.trainable = param.trainable();
    s.location = static_cast<int>(param.location());
    std::tie(s.tpAxis, s.tpParts, s.tpBlocks, s.tpWhole) = impl->tpSplitOf(i);
    s.data = impl->paramPtr[i];
    s.bytes = dtypeSize(s.dtype);
    for (int64_t d : s.shape)
      s.bytes *= d;
    out.push_back(std::move(s));
  }
  return out;
}

} // namespace ds::rt

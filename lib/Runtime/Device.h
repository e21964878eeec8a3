//===- Device.h - an accelerator for the executor ---------------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM, no CUDA types).
//
// The executor runs a plan on the host (the CPU backend) or on a device:
// then the arena, parameters, inputs and constants live in device memory,
// kernels come from the device's registry (filled as the CPU's, Kernel.h)
// and run on its stream, and the executor copies inputs in and outputs and
// storage out.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_DEVICE_H
#define DS_RUNTIME_DEVICE_H

#include "Cpu/Kernels.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace ds::rt {

class Device {
public:
  virtual ~Device() = default;
  /// "cuda:0 (NVIDIA H200, 139 GiB)".
  virtual std::string describe() const = 0;
  /// Device memory; null when it cannot be had (`err` says why).
  virtual void *allocate(size_t bytes, std::string &err) = 0;
  virtual void release(void *p) = 0;
  virtual bool toDevice(void *dst, const void *src, size_t bytes,
                        std::string &err) = 0;
  virtual bool toHost(void *dst, const void *src, size_t bytes,
                      std::string &err) = 0;
  /// Waits for every kernel launched so far; reports an asynchronous error.
  virtual bool synchronize(std::string &err) = 0;
  /// Offload: page-locks host memory the device copies from and to (the
  /// host arena, host storage); undone by unpinHost.
  virtual bool pinHost(void *p, size_t bytes, std::string &err) = 0;
  virtual void unpinHost(void *p) = 0;
  /// Offload: copies `bytes` (either end host or device) on the copy
  /// stream, after the work launched so far on the compute stream; `handle`
  /// names its completion.
  virtual bool copyAsync(void *dst, const void *src, size_t bytes,
                         int &handle, std::string &err) = 0;
  /// Waits for copy `handle`: the host blocks (`onHost`), or the compute
  /// stream's later work waits; the handle is then free.
  virtual bool waitCopy(int handle, bool onHost, std::string &err) = 0;
  /// The device's kernels, registered as the CPU's (Kernel.h).
  virtual const KernelRegistry &kernels() const = 0;
  /// The device kernel of a plan's kernel id, or null when it has none.
  const KernelInfo *kernel(const std::string &name) const {
    return kernels().find(name);
  }
  /// Kernel ids this device implements.
  std::vector<std::string> kernelNames() const { return kernels().names(); }
};

/// The first visible CUDA device, or null with `err` saying why.
std::unique_ptr<Device> openCudaDevice(std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_DEVICE_H

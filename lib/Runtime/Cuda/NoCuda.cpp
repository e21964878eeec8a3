//===- NoCuda.cpp - the CUDA backend's entry points without CUDA ----------===//
//
// Part of the ds project (runtime). Built when CMake found no nvcc: ds-run
// then runs on the CPU only and says so when asked for CUDA.
//
//===----------------------------------------------------------------------===//

#include "../Device.h"

namespace ds::rt {

bool builtWithCuda() { return false; }
bool cudaDeviceVisible() { return false; }
std::unique_ptr<Device> openCudaDevice(std::string &err) {
  err = "this ds-run was built without the CUDA backend (no nvcc at build "
        "time); use --backend=cpu";
  return nullptr;
}

} // namespace ds::rt

//===- PlanImpl.h - the loaded plan (runtime internal) ----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_PLANIMPL_H
#define DS_RUNTIME_PLANIMPL_H

#include "ds/Runtime/Runtime.h"

#include "plan.pb.h"

namespace ds::rt {

class Plan {
public:
  plan::Plan proto;
  std::string path; // the plan file
  std::string dir;  // its folder (weights paths are relative to it)
  uint64_t checksum = 0; // the header's FNV-1a 64 of the payload
};

DType toDType(plan::DType t);
/// The ONNX TensorProto data type of `t`.
int onnxType(DType t);

/// The whole of a file, binary; false when it cannot be opened or read.
bool readFile(const std::string &path, std::string &out);

/// Writes `bytes` to `path` durably: a temporary file, fsync, rename, and
/// the folder synced, so a crash leaves the old file or the new one.
bool writeAtomically(const std::string &path, const std::string &bytes,
                     std::string &err);

/// The bytes of an uncompressed .npz holding `arrays`.
bool encodeNpz(const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
               std::string &zip, std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_PLANIMPL_H

//===- ZeroOnePhase.h - 0/1 Adam's phase in 1-bit Adam's ZeRO kernels ----===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// 0/1 Adam under ZeRO 1-2 (docs/compression.md) runs on 1-bit Adam's
// partition kernels (compressed_reduce_scatter, onebit_adam_local,
// compressed_all_gather) with its policy as attributes.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_ZEROONEPHASE_H
#define DS_RUNTIME_CPU_ZEROONEPHASE_H

#include "../Kernel.h"
#include "ds/Support/ZeroOne.h"

#include <optional>

namespace ds::rt {

/// The policy's parameters when the kernel carries them
/// (`local_step_scaler` and the rest), else nullopt (1-bit Adam's freeze
/// step decides).
inline std::optional<::ds::zeroone::Policy> zeroOnePolicy(const Attrs &a) {
  if (!a.has("local_step_scaler"))
    return std::nullopt;
  ::ds::zeroone::Policy p{a.getInt("var_freeze_step", 100000),
                          a.getInt("var_update_scaler", 16),
                          a.getInt("local_step_scaler", 32678),
                          a.getInt("local_step_clipper", 16)};
  if (!::ds::zeroone::validPolicy(p))
    return std::nullopt;
  return p;
}

/// The phase of step `t` under the kernel's policy, if it has one.
inline std::optional<::ds::zeroone::Phase> zeroOnePhase(const Attrs &a,
                                                        int64_t t) {
  if (auto p = zeroOnePolicy(a))
    return ::ds::zeroone::phaseAt(t, *p);
  return std::nullopt;
}

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_ZEROONEPHASE_H

//===- PlanFormat.h - plan.bin framing shared by writer and reader -*- C++ -*-===//
//
// Part of the ds project. Header-only, no MLIR or LLVM: the runtime uses it.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_PLANFORMAT_H
#define DS_SUPPORT_PLANFORMAT_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ds {

/// The format version this build writes and reads. Bump on any change of
/// plan.proto's meaning. 2: instructions carry their kind, phase, FLOPs,
/// bytes, collectives and typed parameters (KernelKinds.def).
constexpr uint32_t kPlanFormatVersion = 2;
constexpr char kPlanMagic[8] = {'D', 'S', 'P', 'L', 'A', 'N', '\0', '\0'};
constexpr size_t kPlanHeaderBytes = 32;

/// Graph inputs the compiler adds: the optimizer's step counter and the
/// fp16 loss scale (the runtime feeds both).
constexpr const char *kStepInput = "ds.step";
constexpr const char *kLossScaleInput = "ds.loss_scale";

/// FNV-1a 64 over `size` bytes, continuing from `hash`.
inline uint64_t fnv1a64(const void *data, size_t size,
                        uint64_t hash = 0xcbf29ce484222325ULL) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

struct PlanHeader {
  uint32_t version = 0;
  uint64_t payloadBytes = 0;
  uint64_t checksum = 0;
};

inline void encodePlanHeader(const PlanHeader &h, unsigned char out[32]) {
  std::memset(out, 0, kPlanHeaderBytes);
  std::memcpy(out, kPlanMagic, 8);
  for (int i = 0; i < 4; ++i)
    out[8 + i] = static_cast<unsigned char>(h.version >> (8 * i));
  for (int i = 0; i < 8; ++i) {
    out[16 + i] = static_cast<unsigned char>(h.payloadBytes >> (8 * i));
    out[24 + i] = static_cast<unsigned char>(h.checksum >> (8 * i));
  }
}

/// False if the first 8 bytes are not the magic.
inline bool decodePlanHeader(const unsigned char in[32], PlanHeader &h) {
  if (std::memcmp(in, kPlanMagic, 8) != 0)
    return false;
  h = PlanHeader();
  for (int i = 0; i < 4; ++i)
    h.version |= static_cast<uint32_t>(in[8 + i]) << (8 * i);
  for (int i = 0; i < 8; ++i) {
    h.payloadBytes |= static_cast<uint64_t>(in[16 + i]) << (8 * i);
    h.checksum |= static_cast<uint64_t>(in[24 + i]) << (8 * i);
  }
  return true;
}

} // namespace ds

#endif // DS_SUPPORT_PLANFORMAT_H

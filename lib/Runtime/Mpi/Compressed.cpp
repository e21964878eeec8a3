//===- Compressed.cpp - 1-bit compression and its all-reduce --------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The arithmetic of DeepSpeed's compressed_allreduce
// (deepspeed/runtime/comm/nccl.py), in f32: the norm is summed in double
// and rounded once (DeepSpeed's torch.linalg.norm sums in its own order,
// so its last bit may differ).
//
//===----------------------------------------------------------------------===//

#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace ds::rt::onebit {

float compress(const float *values, float *error, int64_t n,
               uint8_t *packed) {
  double sumSq = 0;
  for (int64_t i = 0; i < n; ++i) {
    float x = values[i] + error[i];
    error[i] = x;
    sumSq += static_cast<double>(x) * x;
  }
  float scale = n > 0 ? static_cast<float>(std::sqrt(sumSq) /
                                           std::sqrt(static_cast<double>(n)))
                      : 0.0f;
  std::memset(packed, 0, static_cast<size_t>(n / 8));
  for (int64_t i = 0; i < n; ++i) {
    // sign(x) + 1 as a bool: x >= 0 (and NaN) is +1, as DeepSpeed's.
    bool positive = !(error[i] < 0.0f);
    if (positive)
      packed[i >> 3] |= static_cast<uint8_t>(1u << (7 - (i & 7)));
    error[i] -= positive ? scale : -scale;
  }
  return scale;
}

bool compressedAllReduce(Communicator &comm, float *m, int64_t n,
                         float *workerError, int64_t padded,
                         float *serverError, std::string &err) {
  int world = comm.size();
  if (padded != ::ds::onebit::paddedSize(n, world)) {
    err = "1-bit exchange: a worker error of " + std::to_string(padded) +
          " elements does not pad " + std::to_string(n) + " elements over " +
          std::to_string(world) + " ranks";
    return false;
  }
  int64_t chunk = padded / world;
  uint64_t chunkBytes = static_cast<uint64_t>(chunk / 8);
  // Worker: the padded momentum plus its error, compressed.
  std::vector<float> x(padded, 0.0f);
  std::memcpy(x.data(), m, n * sizeof(float));
  std::vector<uint8_t> signs(padded / 8), received(padded / 8);
  float workerScale = compress(x.data(), workerError, padded, signs.data());
  std::vector<float> scales(world), serverScales(world);
  if (!comm.allToAll(signs.data(), received.data(), chunkBytes, err) ||
      !comm.allGather(&workerScale, scales.data(), 1, DType::F32, err))
    return false;
  // Server: this rank's chunk averaged over the workers, compressed again.
  std::vector<float> y(chunk, 0.0f);
  for (int r = 0; r < world; ++r) {
    float w = scales[r] * (1.0f / static_cast<float>(world));
    const uint8_t *bits = received.data() + r * chunkBytes;
    for (int64_t k = 0; k < chunk; ++k)
      y[k] += signAt(bits, k) * w;
  }
  std::vector<uint8_t> serverSigns(chunkBytes);
  float serverScale = compress(y.data(), serverError, chunk, serverSigns.data());
  if (!comm.allGather(serverSigns.data(), signs.data(),
                      static_cast<int64_t>(chunkBytes), DType::Bool, err) ||
      !comm.allGather(&serverScale, serverScales.data(), 1, DType::F32, err))
    return false;
  comm.collectiveBytes += ::ds::onebit::exchangeBytes(padded, world);
  for (int64_t i = 0; i < n; ++i)
    m[i] = serverScales[i / chunk] * signAt(signs.data(), i);
  return true;
}

bool meanAllReduce(Communicator &comm, float *x, int64_t n,
                   std::string &err) {
  comm.collectiveBytes += static_cast<uint64_t>(n) * sizeof(float);
  return comm.allReduce(x, n, DType::F32, /*mean=*/true, err);
}

bool compressedReduceScatter(Communicator &comm, const float *input,
                             int64_t chunk, float *workerError, float *out,
                             std::string &err) {
  int world = comm.size();
  uint64_t chunkBytes = static_cast<uint64_t>((chunk + 7) / 8);
  // Worker: chunk j of input + error, compressed for rank j.
  std::vector<float> scales(world), received(world);
  std::vector<uint8_t> signs(chunkBytes * world, 0), gotSigns(signs.size());
  for (int j = 0; j < world; ++j)
    scales[j] = compress(input + j * chunk, workerError + j * chunk, chunk,
                         signs.data() + j * chunkBytes);
  if (!comm.allToAll(signs.data(), gotSigns.data(), chunkBytes, err) ||
      !comm.allToAll(scales.data(), received.data(), sizeof(float), err))
    return false;
  comm.collectiveBytes += ::ds::onebit::reduceScatterBytes(chunk, world);
  // Owner: the mean of every rank's decompressed chunk, in rank order.
  std::fill(out, out + chunk, 0.0f);
  for (int r = 0; r < world; ++r) {
    float w = received[r] * (1.0f / static_cast<float>(world));
    const uint8_t *bits = gotSigns.data() + r * chunkBytes;
    for (int64_t k = 0; k < chunk; ++k)
      out[k] += signAt(bits, k) * w;
  }
  return true;
}

} // namespace ds::rt::onebit

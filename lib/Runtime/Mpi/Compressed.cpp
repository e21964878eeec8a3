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
#include "QuantizeRecord.h"
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

namespace ds::rt::onebit {

namespace {
/// One piece of `c` elements (the first `real` of them not padding) as
/// int8 values and f32 block scales, at `dst`: ZeRO++'s quantization rule
/// (QuantizeRecord.h) in this piece's layout (the values, then the scales).
void quantizePiece(const float *x, int64_t c, int64_t real, uint8_t *dst) {
  const int64_t block = ::ds::onebit::kQuantBlock;
  auto *q = reinterpret_cast<int8_t *>(dst);
  uint8_t *scales = dst + c;
  auto load = [x](int64_t k) { return x[k]; };
  for (int64_t b0 = 0, bi = 0; b0 < c; b0 += block, ++bi) {
    int64_t end = std::min(c, b0 + block);
    float s = quant::blockScale(load, b0, std::min(end, real), 8);
    for (int64_t k = b0; k < end; ++k)
      q[k] = static_cast<int8_t>(k < real ? quant::quantizeValue(x[k], s, 8)
                                          : 0);
    std::memcpy(scales + 4 * bi, &s, sizeof s);
  }
}

/// The inverse of quantizePiece: `c` dequantized elements to `out`.
void dequantizePiece(const uint8_t *src, int64_t c, float *out) {
  const int64_t block = ::ds::onebit::kQuantBlock;
  const auto *q = reinterpret_cast<const int8_t *>(src);
  for (int64_t k = 0; k < c; ++k) {
    float s;
    std::memcpy(&s, src + c + 4 * (k / block), sizeof s);
    out[k] = quant::dequantizeValue(q[k], s);
  }
}
} // namespace

bool compressedAllGather(Communicator &comm, const float *input,
                         const float *base, int64_t chunk, int64_t valid,
                         float *error, float *out, std::string &err) {
  int world = comm.size();
  int64_t first = static_cast<int64_t>(comm.rank()) * chunk;
  // The owner: this chunk's delta plus its error (0 and no error for
  // padding), quantized; the error keeps what the quantization lost.
  int64_t real = std::clamp<int64_t>(valid - first, 0, chunk);
  std::vector<float> x(chunk, 0.0f), sent(chunk);
  for (int64_t k = 0; k < real; ++k)
    x[k] = input[k] - base[first + k] + error[k];
  uint64_t part = ::ds::onebit::quantizedPieceBytes(chunk);
  std::vector<uint8_t> send(part), all(part * world);
  quantizePiece(x.data(), chunk, real, send.data());
  dequantizePiece(send.data(), chunk, sent.data());
  for (int64_t k = 0; k < chunk; ++k)
    error[k] = k < real ? x[k] - sent[k] : 0.0f;
  if (!comm.allGather(send.data(), all.data(), static_cast<int64_t>(part),
                      DType::Bool, err))
    return false;
  comm.collectiveBytes += ::ds::onebit::gatherBytes(chunk, world);
  // Every rank, the owner too: base + the dequantized deltas.
  for (int r = 0; r < world; ++r) {
    dequantizePiece(all.data() + r * part, chunk, sent.data());
    for (int64_t k = 0; k < chunk; ++k)
      out[r * chunk + k] = base[r * chunk + k] + sent[k];
  }
  return true;
}

bool quantizedAllGather(Communicator &comm, const float *input,
                        const std::vector<int64_t> &pieces,
                        const std::vector<int64_t> &valid, float *out,
                        std::string &err) {
  int world = comm.size();
  int rank = comm.rank();
  uint64_t part = ::ds::onebit::quantizedGatherBytes(pieces, 1);
  int64_t total = 0;
  for (int64_t c : pieces)
    total += c;
  std::vector<uint8_t> send(part), all(part * world);
  uint64_t at = 0;
  int64_t offset = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    int64_t c = pieces[k];
    int64_t real = std::clamp<int64_t>(valid[k] - rank * c, 0, c);
    quantizePiece(input + offset, c, real, send.data() + at);
    at += ::ds::onebit::quantizedPieceBytes(c);
    offset += c;
  }
  if (!comm.allGather(send.data(), all.data(), static_cast<int64_t>(part),
                      DType::Bool, err))
    return false;
  comm.collectiveBytes += part * static_cast<uint64_t>(world);
  for (int r = 0; r < world; ++r) {
    at = r * part;
    offset = 0;
    for (int64_t c : pieces) {
      dequantizePiece(all.data() + at, c, out + r * total + offset);
      at += ::ds::onebit::quantizedPieceBytes(c);
      offset += c;
    }
  }
  return true;
}

} // namespace ds::rt::onebit

//===- Compressed.h - 1-bit compression and its all-reduce ------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// DeepSpeed's error-compensated 1-bit compression (docs/compression.md):
// a vector becomes the signs of its elements (0 counts as +1), packed
// eight to a byte with the first element in the high bit, and one scale
// ||x|| / sqrt(n); what the compression loses is kept as the error that
// the next exchange adds back. The all-reduce compresses twice: each rank
// (worker) its whole vector, each rank (server) its chunk of the average.
// The reduce-scatter (ZeRO 1-3) compresses once: each rank its chunks,
// each with its scale; the partition's owner keeps the average.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_MPI_COMPRESSED_H
#define DS_RUNTIME_MPI_COMPRESSED_H

#include <cstdint>
#include <string>
#include <vector>

namespace ds::rt {
class Communicator;

namespace onebit {

/// x = values + error (written into `error`), then the scale ||x|| /
/// sqrt(n), the packed signs of x (n/8 bytes; n a multiple of 8) and the
/// new error x - scale sign(x). Returns the scale.
float compress(const float *values, float *error, int64_t n,
               uint8_t *packed);

/// The sign (+1 or -1) of element i of packed signs.
inline float signAt(const uint8_t *packed, int64_t i) {
  return (packed[i >> 3] >> (7 - (i & 7))) & 1 ? 1.0f : -1.0f;
}

/// The warm-up's exchange of the compressed optimizers: `x` (n f32)
/// replaced by its mean over `comm` (an all-reduce), its 4n bytes added to
/// comm.collectiveBytes.
bool meanAllReduce(Communicator &comm, float *x, int64_t n, std::string &err);

/// The compressed all-reduce (mean) of `m` (n elements) over `comm`, as
/// DeepSpeed's compressed_allreduce: `m` padded with zeros to the
/// worker error's `padded` elements (ds::onebit::paddedSize) is
/// compressed with the worker error; the packed signs go to their chunk's
/// rank by all-to-all and the scales to every rank by all-gather; rank j
/// averages chunk j, compresses it with the server error (padded / N
/// elements) and every rank all-gathers the server signs and scales. `m`
/// receives the decompressed result. Adds the bytes it hands to
/// collectives to comm.collectiveBytes.
bool compressedAllReduce(Communicator &comm, float *m, int64_t n,
                         float *workerError, int64_t padded,
                         float *serverError, std::string &err);

/// The compressed reduce-scatter (mean) of `input` (world chunks of
/// `chunk` elements, chunk j for rank j) over `comm`, the exchange of 1-bit
/// Adam under ZeRO 1-3: each chunk of input + `workerError` (the input's
/// length) is compressed with its own scale, the worker error keeps what
/// the compression lost for that partition; the packed signs and scales of
/// chunk j go to rank j (all-to-all), which writes the mean of the
/// decompressed chunks to `out`. Adds the bytes it hands to
/// comm.collectiveBytes.
bool compressedReduceScatter(Communicator &comm, const float *input,
                             int64_t chunk, float *workerError, float *out,
                             std::string &err);

/// The compressed all-gather of an update delta (1-bit Adam's parameter
/// exchange at ZeRO 1-2): `base` is the whole padded parameter before the
/// update (world chunks of `chunk`; the same on every rank), `input` this
/// rank's updated chunk. x = input - base's chunk + `error` (0 and no error
/// for padding, elements at or past `valid` in the whole) is quantized
/// int8 in blocks (as quantizedAllGather's pieces); `error` keeps what it
/// lost; the values and block scales are all-gathered and `out` (the
/// whole) gets base + each chunk's dequantized delta, the same on every
/// rank. `out` may be `base`. Adds the bytes it hands to
/// comm.collectiveBytes.
bool compressedAllGather(Communicator &comm, const float *input,
                         const float *base, int64_t chunk, int64_t valid,
                         float *error, float *out, std::string &err);

/// The int8 block-quantized all-gather (stage 3's parameter gathers after
/// the freeze): `input` is this rank's pieces (`pieces[k]` elements each,
/// one after another; elements of piece k at or past `valid[k]` in its
/// gathered whole are padding, sent as 0); each piece is quantized in
/// blocks of ds::onebit::kQuantBlock with scale max|x| / 127; `out` gets
/// every rank's pieces dequantized, in rank order. Adds the bytes it hands
/// to comm.collectiveBytes.
bool quantizedAllGather(Communicator &comm, const float *input,
                        const std::vector<int64_t> &pieces,
                        const std::vector<int64_t> &valid, float *out,
                        std::string &err);

} // namespace onebit
} // namespace ds::rt

#endif // DS_RUNTIME_MPI_COMPRESSED_H

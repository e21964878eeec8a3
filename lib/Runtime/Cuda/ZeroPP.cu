//===- ZeroPP.cu - ZeRO++'s quantized collectives on CUDA -----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The CUDA twins of Cpu/ZeroPP.cpp (docs/zeropp.md): the same records
// (include/ds/Support/Quantize.h) written and read by device kernels into
// the planned device workspace, the same f32 arithmetic (x / s rounded
// half to even, q s, the received records added in rank order). The
// exchange is staged through the host over the MPI communicator (one
// all-gather or all-to-all of the records), not over NCCL: correct, not
// fast. Compiled by nvcc; not run on a GPU yet.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "../QuantizeRecord.h"
#include "ds/Runtime/Comm.h"

#include <vector>

namespace ds::rt::cuda {
namespace {

__device__ inline float qmaxOf(int bits) {
  return static_cast<float>((1 << (bits - 1)) - 1);
}

/// One CUDA block per quantization block: its scale max|x| / qmax (a
/// non-finite maximum is kept: the block reads back as NaN).
__global__ void blockScales(const void *x, int dt, int64_t base, int64_t n,
                            int64_t block, int bits, float *scales) {
  __shared__ float part[256];
  int64_t nb = (n + block - 1) / block;
  for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
    int64_t lo = b * block, hi = n < lo + block ? n : lo + block;
    float amax = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float a = fabsf(static_cast<float>(load(x, dt, base + i)));
      if (!isnan(amax) && !(a <= amax)) // a NaN stays once seen
        amax = a;
    }
    part[threadIdx.x] = amax;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w && !isnan(part[threadIdx.x]) &&
          !(part[threadIdx.x + w] <= part[threadIdx.x]))
        part[threadIdx.x] = part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0)
      scales[b] = isfinite(part[0]) ? part[0] / qmaxOf(bits) : part[0];
    __syncthreads();
  }
}

__device__ inline int quantizeOne(float x, float s, int bits) {
  if (!(s > 0.0f) || !isfinite(s))
    return 0;
  float m = qmaxOf(bits);
  return static_cast<int>(fminf(m, fmaxf(-m, rintf(x / s))));
}

/// The packed values, one byte per thread (two elements at 4 bits).
__global__ void packValues(const void *x, int dt, int64_t base, int64_t n,
                           int64_t block, int bits, const float *scales,
                           uint8_t *values, int64_t bytes) {
  DS_GRID_LOOP(k, bytes) {
    if (bits == 8) {
      int q = k < n ? quantizeOne(static_cast<float>(load(x, dt, base + k)),
                                  scales[k / block], bits)
                    : 0;
      values[k] = static_cast<uint8_t>(static_cast<int8_t>(q));
    } else {
      uint8_t byte = 0;
      for (int h = 0; h < 2; ++h) {
        int64_t e = 2 * k + h;
        if (e >= n)
          break;
        int q = quantizeOne(static_cast<float>(load(x, dt, base + e)),
                            scales[e / block], bits);
        byte |= static_cast<uint8_t>((static_cast<uint8_t>(q) & 0xF) << (4 * h));
      }
      values[k] = byte;
    }
  }
}

/// out[base + i] = x'_i (or += with `add`, f32 only).
__global__ void readValues(const uint8_t *rec, int64_t n, int64_t block,
                           int bits, void *out, int dt, int64_t base,
                           bool add) {
  int64_t nb = (n + block - 1) / block;
  const float *scales = reinterpret_cast<const float *>(rec);
  const uint8_t *values = rec + 4 * nb;
  DS_GRID_LOOP(i, n) {
    int q;
    if (bits == 8) {
      q = static_cast<int8_t>(values[i]);
    } else {
      int nib = (i % 2 == 0) ? (values[i / 2] & 0xF) : (values[i / 2] >> 4);
      q = nib >= 8 ? nib - 16 : nib;
    }
    float s = scales[i / block];
    float v = isfinite(s) ? static_cast<float>(q) * s : NAN;
    if (add)
      static_cast<float *>(out)[base + i] += v;
    else
      store(out, dt, base + i, v);
  }
}

__global__ void scaleBy(float *x, int64_t n, float f) {
  DS_GRID_LOOP(i, n) { x[i] = x[i] * f; }
}

/// Writes the record of x[base, base + n) to `rec` on the device.
bool writeRecord(KernelContext &ctx, const TensorView &x, int64_t base,
                 int64_t n, int64_t block, int bits, uint8_t *rec) {
  int64_t nb = ::ds::quant::blocks(n, block);
  int64_t bytes = static_cast<int64_t>(::ds::quant::valueBytes(n, bits));
  int dt = static_cast<int>(x.dtype);
  blockScales<<<static_cast<unsigned>(std::min<int64_t>(nb, 65535)), 256, 0,
                gStream>>>(x.data, dt, base, n, block, bits,
                           reinterpret_cast<float *>(rec));
  packValues<<<blocksFor(bytes), 256, 0, gStream>>>(
      x.data, dt, base, n, block, bits, reinterpret_cast<float *>(rec),
      rec + 4 * nb, bytes);
  return launched(ctx);
}

/// The exchange of `bytes` bytes per rank through the host: an all-gather
/// from `mine` into `all`, or an all-to-all from `mine` (world records).
bool hostExchange(KernelContext &ctx, const uint8_t *mine, uint8_t *all,
                  uint64_t bytes, bool gather) {
  Communicator &comm = *ctx.comm;
  int world = comm.size();
  std::vector<uint8_t> send(gather ? bytes : bytes * world),
      got(bytes * world);
  std::string err;
  if (!readBack(ctx, send.data(), mine, send.size()))
    return false;
  comm.collectiveBytes += world * bytes;
  bool ok = gather ? comm.allGather(send.data(), got.data(),
                                    static_cast<int64_t>(bytes / 4),
                                    DType::F32, err)
                   : comm.allToAll(send.data(), got.data(), bytes, err);
  if (!ok)
    return ctx.fail(err);
  if (cudaMemcpyAsync(all, got.data(), got.size(), cudaMemcpyHostToDevice,
                      gStream) != cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

bool kQuantizedAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  quant::QuantizedSizes q;
  if (!quant::checkQuantizedCollective(ctx, true, q))
    return false;
  const int world = q.world, bits = q.bits;
  const int64_t shard = q.part, block = q.block;
  const uint64_t record = q.record;
  uint8_t *mine = ctx.out[1].as<uint8_t>(), *all = mine + record;
  if (!writeRecord(ctx, in, 0, shard, block, bits, mine))
    return false;
  if (world > 1 ? !hostExchange(ctx, mine, all, record, true)
                : !copyDevice(ctx, mine, all, record))
    return false;
  for (int r = 0; r < world; ++r)
    readValues<<<blocksFor(shard), 256, 0, gStream>>>(
        all + r * record, shard, block, bits, out.data,
        static_cast<int>(out.dtype), r * shard, false);
  return launched(ctx);
}

bool kQuantizedReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  quant::QuantizedSizes q;
  if (!quant::checkQuantizedCollective(ctx, false, q))
    return false;
  const int world = q.world, bits = q.bits;
  const int64_t chunk = q.part, block = q.block;
  const uint64_t record = q.record;
  uint8_t *sent = ctx.out[1].as<uint8_t>(), *got = sent + world * record;
  for (int j = 0; j < world; ++j)
    if (!writeRecord(ctx, in, j * chunk, chunk, block, bits,
                     sent + j * record))
      return false;
  if (world > 1 ? !hostExchange(ctx, sent, got, record, false)
                : !copyDevice(ctx, sent, got, record))
    return false;
  if (cudaMemsetAsync(out.data, 0, chunk * sizeof(float), gStream) !=
      cudaSuccess)
    return launched(ctx);
  for (int r = 0; r < world; ++r)
    readValues<<<blocksFor(chunk), 256, 0, gStream>>>(
        got + r * record, chunk, block, bits, out.data, 1, 0, true);
  if (ctx.attrs.getString("reduction", "sum") == "mean")
    scaleBy<<<blocksFor(chunk), 256, 0, gStream>>>(
        out.as<float>(), chunk, 1.0f / static_cast<float>(world));
  return launched(ctx);
}

} // namespace

void registerZeroPPKernels(KernelRegistry &r) {
  r.add("quantized_all_gather", kQuantizedAllGather);
  r.add("quantized_reduce_scatter", kQuantizedReduceScatter);
}

} // namespace ds::rt::cuda

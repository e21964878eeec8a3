//===- CudaDevice.cu - the CUDA backend: device, memory, kernels ----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// One device, one stream, one cuBLAS handle. Kernels take the CPU
// kernels' KernelContext with device pointers and launch on the stream.
// This is the first part of the backend (docs/design.md section 9): the
// elementwise family with broadcasting, casts, where, matmul and gemm
// through cuBLAS with f32 accumulation, transpose, copies, reductions and
// softmax. A plan that needs a kernel without a CUDA version is refused
// when the executor is created, naming the kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace ds::rt {
namespace cuda {

cudaStream_t gStream = nullptr;

bool makeLayout(const TensorView &out, const std::vector<const TensorView *> &ins,
                Layout &l, std::string &err) {
  if (out.rank() > kMaxRank) {
    err = "rank above 8";
    return false;
  }
  l.rank = static_cast<int>(out.rank());
  for (int d = 0; d < l.rank; ++d)
    l.shape[d] = out.shape[d];
  for (size_t k = 0; k < ins.size(); ++k) {
    const TensorView &t = *ins[k];
    if (t.rank() > out.rank()) {
      err = "an operand has a higher rank than the result";
      return false;
    }
    int64_t stride = 1;
    for (int d = l.rank - 1, s = static_cast<int>(t.rank()) - 1; d >= 0;
         --d, --s) {
      int64_t dim = s >= 0 ? t.shape[s] : 1;
      if (dim != 1 && dim != l.shape[d]) {
        err = "operands do not broadcast";
        return false;
      }
      l.strides[k][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  return true;
}


} // namespace cuda

namespace {
using namespace cuda;

cublasHandle_t gBlas = nullptr;

/// cuBLAS, opened when a device is (ds-run without a GPU never loads it).
struct Blas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) setStream = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                         int, int, int, const void *, const void *,
                         cudaDataType, int, long long, const void *,
                         cudaDataType, int, long long, const void *, void *,
                         cudaDataType, int, long long, int,
                         cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
} gBlasApi;

bool openBlas(std::string &err) {
  if (gBlasApi.gemm)
    return true;
  void *lib = nullptr;
  for (const char *name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib) {
    err = std::string("cannot load cuBLAS (libcublas.so.13): ") + dlerror();
    return false;
  }
  gBlasApi.create =
      reinterpret_cast<decltype(gBlasApi.create)>(dlsym(lib, "cublasCreate_v2"));
  gBlasApi.setStream = reinterpret_cast<decltype(gBlasApi.setStream)>(
      dlsym(lib, "cublasSetStream_v2"));
  gBlasApi.gemm = reinterpret_cast<decltype(gBlasApi.gemm)>(
      dlsym(lib, "cublasGemmStridedBatchedEx"));
  if (!gBlasApi.create || !gBlasApi.setStream || !gBlasApi.gemm) {
    err = "cuBLAS lacks cublasGemmStridedBatchedEx";
    gBlasApi = {};
    return false;
  }
  return true;
}

enum Op : int {
  Add, Sub, Mul, Div, Pow, Max, Min, Eq, Lt, Le, Gt, Ge, And, Or, Xor,
  Neg, Abs, Exp, Log, Sqrt, Recip, Erf, Tanh, Relu, Sigmoid, Not, Copy
};

__device__ double apply(int op, double a, double b, bool isFloat) {
  switch (op) {
  case Add: return a + b;
  case Sub: return a - b;
  case Mul: return a * b;
  case Div:
    if (isFloat)
      return a / b;
    // Integer division truncates, as ONNX.
    return b == 0 ? 0 : static_cast<double>(static_cast<int64_t>(a) /
                                            static_cast<int64_t>(b));
  case Pow: return pow(a, b);
  case Max: return a > b || isnan(a) ? a : b;
  case Min: return a < b || isnan(a) ? a : b;
  case Eq: return a == b;
  case Lt: return a < b;
  case Le: return a <= b;
  case Gt: return a > b;
  case Ge: return a >= b;
  case And: return (a != 0) && (b != 0);
  case Or: return (a != 0) || (b != 0);
  case Xor: return (a != 0) != (b != 0);
  case Neg: return -a;
  case Abs: return fabs(a);
  case Exp: return exp(a);
  case Log: return log(a);
  case Sqrt: return sqrt(a);
  case Recip: return 1.0 / a;
  case Erf: return erf(a);
  case Tanh: return tanh(a);
  case Relu: return a > 0 ? a : 0;
  case Sigmoid: return 1.0 / (1.0 + exp(-a));
  case Not: return a == 0;
  case Copy: return a;
  }
  return 0;
}

/// Rounds `v` through f32 when the result is f32, so that f32 arithmetic
/// matches the CPU kernels' (which compute f32 ops in float).
__device__ double asFloat(double v, int dt) {
  return dt == 1 ? static_cast<double>(static_cast<float>(v)) : v;
}

__global__ void elementwise(int op, Layout l, int64_t n, const void *a,
                            int at, const void *b, int bt, void *o, int ot,
                            bool isFloat) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets(l, i, b ? 2 : 1, off);
    double x = load(a, at, off[0]);
    double y = b ? load(b, bt, off[1]) : 0;
    if (at == 1 && (!b || bt == 1)) { // f32 operands: compute in float
      x = static_cast<float>(x);
      y = static_cast<float>(y);
    }
    store(o, ot, i, asFloat(apply(op, x, y, isFloat), ot));
  }
}

__global__ void whereKernel(Layout l, int64_t n, const void *c, int ct,
                            const void *x, int xt, const void *y, int yt,
                            void *o, int ot) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets(l, i, 3, off);
    store(o, ot, i, load(c, ct, off[0]) != 0 ? load(x, xt, off[1])
                                             : load(y, yt, off[2]));
  }
}

template <int OP> bool kBinary(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  Layout l;
  std::string err;
  if (!makeLayout(o, {&a, &b}, l, err))
    return ctx.fail(err);
  int64_t n = o.numel();
  if (n == 0)
    return true;
  elementwise<<<blocksFor(n), 256, 0, gStream>>>(
      OP, l, n, a.data, int(a.dtype), b.data, int(b.dtype), o.data,
      int(o.dtype), isFloatType(a.dtype));
  return launched(ctx);
}

template <int OP> bool kUnary(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  Layout l;
  std::string err;
  if (!makeLayout(o, {&a}, l, err))
    return ctx.fail(err);
  int64_t n = o.numel();
  if (n == 0)
    return true;
  elementwise<<<blocksFor(n), 256, 0, gStream>>>(
      OP, l, n, a.data, int(a.dtype), nullptr, 0, o.data, int(o.dtype),
      isFloatType(a.dtype));
  return launched(ctx);
}

bool kWhere(KernelContext &ctx) {
  const TensorView &c = ctx.in[0], &x = ctx.in[1], &y = ctx.in[2];
  TensorView &o = ctx.out[0];
  Layout l;
  std::string err;
  if (!makeLayout(o, {&c, &x, &y}, l, err))
    return ctx.fail(err);
  int64_t n = o.numel();
  if (n == 0)
    return true;
  whereKernel<<<blocksFor(n), 256, 0, gStream>>>(
      l, n, c.data, int(c.dtype), x.data, int(x.dtype), y.data, int(y.dtype),
      o.data, int(o.dtype));
  return launched(ctx);
}

/// Same bytes, another shape (reshape, copy).
bool kCopyBytes(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  size_t bytes = o.numel() * dtypeSize(o.dtype);
  if (a.numel() != o.numel() || a.dtype != o.dtype)
    return ctx.fail("copy between tensors of different sizes or types");
  if (a.data != o.data && bytes &&
      cudaMemcpyAsync(o.data, a.data, bytes, cudaMemcpyDeviceToDevice,
                      gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

__global__ void permute(Layout l, int64_t n, const void *a, void *o, int dt,
                        int64_t elem) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    offsets(l, i, 1, off);
    const char *src = static_cast<const char *>(a) + off[0] * elem;
    char *dst = static_cast<char *>(o) + i * elem;
    for (int64_t b = 0; b < elem; ++b)
      dst[b] = src[b];
  }
}

bool kTranspose(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  std::vector<int64_t> perm = ctx.attrs.getInts("perm");
  if (static_cast<int64_t>(perm.size()) != a.rank() || a.rank() > kMaxRank)
    return ctx.fail("transpose perm does not match the operand");
  std::vector<int64_t> st(a.rank(), 1);
  for (int64_t d = a.rank() - 2; d >= 0; --d)
    st[d] = st[d + 1] * a.shape[d + 1];
  Layout l;
  l.rank = static_cast<int>(a.rank());
  for (int d = 0; d < l.rank; ++d) {
    if (perm[d] < 0 || perm[d] >= a.rank())
      return ctx.fail("transpose perm out of range");
    l.shape[d] = a.shape[perm[d]];
    l.strides[0][d] = st[perm[d]];
  }
  int64_t n = o.numel();
  if (n == 0)
    return true;
  permute<<<blocksFor(n), 256, 0, gStream>>>(l, n, a.data, o.data,
                                              int(a.dtype),
                                              int64_t(dtypeSize(a.dtype)));
  return launched(ctx);
}

/// Reductions: one thread per output element over its reduced elements
/// (`count` of them, at `rstrides` over the reduced dimensions), the sum
/// in double as the CPU kernel.
struct Reduction {
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxRank] = {}, keptStride[kMaxRank] = {};
  int64_t redShape[kMaxRank] = {}, redStride[kMaxRank] = {};
};

__global__ void reduceKernel(Reduction r, int64_t n, int64_t count,
                             const void *a, int at, void *o, int ot, int kind) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = 0, rem = i;
    for (int d = r.keptRank - 1; d >= 0; --d) {
      base += (rem % r.keptShape[d]) * r.keptStride[d];
      rem /= r.keptShape[d];
    }
    double acc = kind == 2 ? -INFINITY : 0.0;
    for (int64_t j = 0; j < count; ++j) {
      int64_t off = base, q = j;
      for (int d = r.redRank - 1; d >= 0; --d) {
        off += (q % r.redShape[d]) * r.redStride[d];
        q /= r.redShape[d];
      }
      double v = load(a, at, off);
      acc = kind == 2 ? (v > acc || isnan(v) ? v : acc) : acc + v;
    }
    if (kind == 1 && count > 0)
      acc /= static_cast<double>(count);
    store(o, ot, i, acc);
  }
}

template <int KIND> bool kReduce(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  std::vector<int64_t> axes = ctx.attrs.getInts("axes");
  if (a.rank() > kMaxRank)
    return ctx.fail("rank above 8");
  std::vector<bool> reduced(a.rank(), false);
  for (int64_t ax : axes) {
    if (ax < 0 || ax >= a.rank())
      return ctx.fail("reduction axis out of range");
    reduced[ax] = true;
  }
  std::vector<int64_t> st(a.rank(), 1);
  for (int64_t d = a.rank() - 2; d >= 0; --d)
    st[d] = st[d + 1] * a.shape[d + 1];
  Reduction r;
  int64_t count = 1;
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (reduced[d]) {
      r.redShape[r.redRank] = a.shape[d];
      r.redStride[r.redRank++] = st[d];
      count *= a.shape[d];
    } else {
      r.keptShape[r.keptRank] = a.shape[d];
      r.keptStride[r.keptRank++] = st[d];
    }
  }
  int64_t n = o.numel();
  if (n == 0)
    return true;
  reduceKernel<<<blocksFor(n), 256, 0, gStream>>>(
      r, n, count, a.data, int(a.dtype), o.data, int(o.dtype), KIND);
  return launched(ctx);
}

/// Softmax along `axis`: one thread per (outer, inner) row, in double.
__global__ void softmaxKernel(int64_t rows, int64_t dim, int64_t inner,
                              const void *x, int xt, void *y, int yt,
                              bool logOut) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (r / inner) * dim * inner + r % inner;
    double mx = -INFINITY;
    for (int64_t k = 0; k < dim; ++k)
      mx = fmax(mx, load(x, xt, base + k * inner));
    double sum = 0;
    for (int64_t k = 0; k < dim; ++k)
      sum += exp(load(x, xt, base + k * inner) - mx);
    for (int64_t k = 0; k < dim; ++k) {
      double v = load(x, xt, base + k * inner) - mx;
      store(y, yt, base + k * inner,
            mx == -INFINITY ? NAN : logOut ? v - log(sum) : exp(v) / sum);
    }
  }
}

template <bool LOG> bool kSoftmax(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("softmax axis out of range");
  int64_t outer = 1, inner = 1, dim = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    inner *= x.shape[d];
  int64_t rows = outer * inner;
  if (rows == 0 || dim == 0)
    return true;
  softmaxKernel<<<blocksFor(rows), 256, 0, gStream>>>(
      rows, dim, inner, x.data, int(x.dtype), y.data, int(y.dtype), LOG);
  return launched(ctx);
}

cudaDataType cudaType(DType t) {
  return t == DType::F16 ? CUDA_R_16F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

bool blasOk(KernelContext &ctx, cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS)
    return ctx.fail("cuBLAS error " + std::to_string(static_cast<int>(s)));
  return true;
}

/// Row-major C[M,N] = alpha A[M,K] B[K,N] + beta C over `batches` with
/// element strides, through the column-major identity C^T = B^T A^T; f32
/// accumulation for every storage type.
bool gemmBatched(KernelContext &ctx, DType t, bool ta, bool tb, int64_t M,
                 int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                 int64_t sA, const void *B, int64_t ldb, int64_t sB,
                 float beta, void *C, int64_t sC, int64_t batches) {
  return blasOk(ctx, gBlasApi.gemm(
                         gBlas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M), int(K),
                         &alpha, B, cudaType(t), int(ldb), sB, A, cudaType(t),
                         int(lda), sA, &beta, C, cudaType(t), int(N), sC,
                         int(batches), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
}

bool kMatMul(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  if (a.rank() < 1 || b.rank() < 1)
    return ctx.fail("matmul operands need rank >= 1");
  if (a.dtype != b.dtype || a.dtype != o.dtype || !isFloatType(a.dtype))
    return ctx.fail("matmul operands must share one float type");
  bool ta = ctx.attrs.getInt("trans_a", 0) != 0 && a.rank() >= 2;
  bool tb = ctx.attrs.getInt("trans_b", 0) != 0 && b.rank() >= 2;
  int64_t M = a.rank() == 1 ? 1 : a.shape[a.rank() - (ta ? 1 : 2)];
  int64_t K = a.rank() == 1 ? a.shape[0] : a.shape[a.rank() - (ta ? 2 : 1)];
  int64_t Kb = b.rank() == 1 ? b.shape[0] : b.shape[b.rank() - (tb ? 1 : 2)];
  int64_t N = b.rank() == 1 ? 1 : b.shape[b.rank() - (tb ? 2 : 1)];
  if (K != Kb)
    return ctx.fail("matmul contraction mismatch");
  std::vector<int64_t> aB(a.shape.begin(), a.shape.end() - std::min<int64_t>(a.rank(), 2));
  std::vector<int64_t> bB(b.shape.begin(), b.shape.end() - std::min<int64_t>(b.rank(), 2));
  size_t r = std::max(aB.size(), bB.size());
  std::vector<int64_t> batch(r), sa(r, 0), sb(r, 0);
  int64_t strideA = M * K, strideB = K * N;
  for (size_t i = r; i-- > 0;) {
    int64_t da = i < r - aB.size() ? 1 : aB[i - (r - aB.size())];
    int64_t db = i < r - bB.size() ? 1 : bB[i - (r - bB.size())];
    if (da != db && da != 1 && db != 1)
      return ctx.fail("matmul batch dimensions do not broadcast");
    batch[i] = std::max(da, db);
    sa[i] = da == 1 ? 0 : strideA;
    sb[i] = db == 1 ? 0 : strideB;
    strideA *= da;
    strideB *= db;
  }
  int64_t batches = 1;
  for (int64_t d : batch)
    batches *= d;
  if (batches * M * N != o.numel())
    return ctx.fail("matmul result size does not match its operands");
  if (M * N == 0)
    return true;
  size_t esize = dtypeSize(a.dtype);
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (K == 0)
    return cudaMemsetAsync(o.data, 0, o.numel() * esize, gStream) == cudaSuccess
               ? true
               : launched(ctx);
  // One strided batch when the batch dimensions are a single run of equal
  // (or shared) strides; else one GEMM per batch.
  bool uniform = true;
  for (size_t i = 0; i + 1 < r; ++i)
    uniform &= (sa[i] == 0) == (sa[r - 1] == 0) && (sb[i] == 0) == (sb[r - 1] == 0);
  if (r == 0 || uniform)
    return gemmBatched(ctx, a.dtype, ta, tb, M, N, K, 1.0f, a.data, lda,
                       r ? sa[r - 1] : 0, b.data, ldb, r ? sb[r - 1] : 0, 0.0f,
                       o.data, M * N, batches);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t oa = 0, ob = 0, rem = bi;
    for (size_t i = r; i-- > 0;) {
      int64_t c = rem % batch[i];
      rem /= batch[i];
      oa += c * sa[i];
      ob += c * sb[i];
    }
    if (!gemmBatched(ctx, a.dtype, ta, tb, M, N, K, 1.0f,
                     static_cast<const char *>(a.data) + oa * esize, lda, 0,
                     static_cast<const char *>(b.data) + ob * esize, ldb, 0,
                     0.0f, static_cast<char *>(o.data) + bi * M * N * esize,
                     M * N, 1))
      return false;
  }
  return true;
}

bool kGemm(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  const TensorView *c = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  TensorView &o = ctx.out[0];
  bool ta = ctx.attrs.getInt("trans_a", 0), tb = ctx.attrs.getInt("trans_b", 0);
  float alpha = static_cast<float>(ctx.attrs.getFloat("alpha", 1.0));
  float beta = static_cast<float>(ctx.attrs.getFloat("beta", 1.0));
  if (a.rank() != 2 || b.rank() != 2 || o.rank() != 2)
    return ctx.fail("gemm operands must be 2-D");
  if (a.dtype != b.dtype || a.dtype != o.dtype || !isFloatType(a.dtype))
    return ctx.fail("gemm operands must share one float type");
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t Kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
  if (K != Kb || o.shape[0] != M || o.shape[1] != N)
    return ctx.fail("gemm shapes do not match");
  bool accumulate = c && beta != 0.0f;
  if (accumulate) {
    // C starts as beta * broadcast(c).
    Layout l;
    std::string err;
    if (!makeLayout(o, {c}, l, err))
      return ctx.fail(err);
    int64_t n = o.numel();
    elementwise<<<blocksFor(n), 256, 0, gStream>>>(
        Copy, l, n, c->data, int(c->dtype), nullptr, 0, o.data, int(o.dtype),
        true);
    if (!launched(ctx))
      return false;
  }
  if (M * N == 0)
    return true;
  if (K == 0 && !accumulate)
    return cudaMemsetAsync(o.data, 0, M * N * dtypeSize(o.dtype), gStream) ==
                   cudaSuccess
               ? true
               : launched(ctx);
  return gemmBatched(ctx, a.dtype, ta, tb, M, N, K, alpha, a.data, a.shape[1],
                     0, b.data, b.shape[1], 0, accumulate ? beta : 0.0f,
                     o.data, 0, 1);
}

const KernelInfo kCudaKernels[] = {
    {"add", 2, 2, 1, 1, kBinary<Add>},
    {"sub", 2, 2, 1, 1, kBinary<Sub>},
    {"mul", 2, 2, 1, 1, kBinary<Mul>},
    {"div", 2, 2, 1, 1, kBinary<Div>},
    {"pow", 2, 2, 1, 1, kBinary<Pow>},
    {"max", 2, 2, 1, 1, kBinary<Max>},
    {"min", 2, 2, 1, 1, kBinary<Min>},
    {"equal", 2, 2, 1, 1, kBinary<Eq>},
    {"less", 2, 2, 1, 1, kBinary<Lt>},
    {"less_or_equal", 2, 2, 1, 1, kBinary<Le>},
    {"greater", 2, 2, 1, 1, kBinary<Gt>},
    {"greater_or_equal", 2, 2, 1, 1, kBinary<Ge>},
    {"and", 2, 2, 1, 1, kBinary<And>},
    {"or", 2, 2, 1, 1, kBinary<Or>},
    {"xor", 2, 2, 1, 1, kBinary<Xor>},
    {"neg", 1, 1, 1, 1, kUnary<Neg>},
    {"abs", 1, 1, 1, 1, kUnary<Abs>},
    {"exp", 1, 1, 1, 1, kUnary<Exp>},
    {"log", 1, 1, 1, 1, kUnary<Log>},
    {"sqrt", 1, 1, 1, 1, kUnary<Sqrt>},
    {"reciprocal", 1, 1, 1, 1, kUnary<Recip>},
    {"erf", 1, 1, 1, 1, kUnary<Erf>},
    {"tanh", 1, 1, 1, 1, kUnary<Tanh>},
    {"relu", 1, 1, 1, 1, kUnary<Relu>},
    {"sigmoid", 1, 1, 1, 1, kUnary<Sigmoid>},
    {"not", 1, 1, 1, 1, kUnary<Not>},
    {"cast", 1, 1, 1, 1, kUnary<Copy>},
    {"where", 3, 3, 1, 1, kWhere},
    {"matmul", 2, 2, 1, 2, kMatMul},
    {"gemm", 2, 3, 1, 2, kGemm},
    {"transpose", 1, 1, 1, 1, kTranspose},
    {"reshape", 1, 1, 1, 1, kCopyBytes},
    {"copy", 1, 1, 1, 1, kCopyBytes},
    {"transfer", 1, 1, 1, 1, kCopyBytes}, // offload plans are refused on CUDA
    {"reduce_sum", 1, 1, 1, 1, kReduce<0>},
    {"reduce_mean", 1, 1, 1, 1, kReduce<1>},
    {"reduce_max", 1, 1, 1, 1, kReduce<2>},
    {"softmax", 1, 1, 1, 1, kSoftmax<false>},
    {"log_softmax", 1, 1, 1, 1, kSoftmax<true>},
    {"dropout", 1, 1, 1, 2, cuda::kDropout},
    {"layer_norm", 2, 3, 1, 1, cuda::kLayerNorm},
    {"softmax_cross_entropy_loss", 2, 3, 1, 2, cuda::kSoftmaxCrossEntropyLoss},
    {"nll_loss", 2, 3, 1, 1, cuda::kNllLoss},
    {"gather", 2, 2, 1, 1, cuda::kGather},
    {"expand", 1, 1, 1, 1, cuda::kExpand},
    {"concat", 1, 1 << 20, 1, 1, cuda::kConcat},
    {"split", 1, 1, 1, 1 << 20, cuda::kSplit},
    {"slice", 1, 1, 1, 1, cuda::kSlice},
    {"trilu", 1, 1, 1, 1, cuda::kTrilu},
    {"range", 3, 3, 1, 1, cuda::kRange},
    {"gather_grad", 2, 2, 1, 1, cuda::kGatherGrad},
    {"layer_norm_grad", 3, 3, 3, 3, cuda::kLayerNormGrad},
    {"softmax_grad", 2, 2, 1, 1, cuda::kSoftmaxGrad},
    {"loss_grad", 3, 4, 1, 1, cuda::kLossGrad},
    {"slice_grad", 1, 1, 1, 1, cuda::kSliceGrad},
    {"adam", 5, 6, 3, 4, cuda::kAdam},
    {"sgd", 4, 5, 2, 3, cuda::kSgd},
    {"onnx_update", 5, 6, 2, 3, cuda::kOnnxUpdate},
    {"all_reduce", 1, 1, 1, 1, cuda::kAllReduce},
    {"all_gather", 1, 1, 1, 1, cuda::kAllGather},
    {"reduce_scatter", 1, 1, 1, 1, cuda::kReduceScatter},
    {"shard", 1, 1, 1, 1, cuda::kShard},
    {"wait", 1, 1 << 20, 0, 0, cuda::kWait},
    {"check_overflow", 1, 1 << 20, 1, 1, cuda::kCheckOverflow},
};

class CudaDevice : public Device {
public:
  int index = 0;
  cudaDeviceProp prop{};

  std::string describe() const override {
    char buf[256];
    std::snprintf(buf, sizeof buf, "cuda:%d (%s, %.0f GiB, sm_%d%d)", index,
                  prop.name, prop.totalGlobalMem / 1073741824.0, prop.major,
                  prop.minor);
    return buf;
  }
  void *allocate(size_t bytes, std::string &err) override {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (e != cudaSuccess) {
      err = "cannot allocate " + std::to_string(bytes) + " bytes on " +
            describe() + ": " + cudaGetErrorString(e);
      return nullptr;
    }
    return p;
  }
  void release(void *p) override { cudaFree(p); }
  bool toDevice(void *dst, const void *src, size_t bytes,
                std::string &err) override {
    // Default: UVA tells host from device (the host end may be pinned).
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                 gStream),
                 err) &&
           synchronize(err);
  }
  bool toHost(void *dst, const void *src, size_t bytes,
              std::string &err) override {
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                 gStream),
                 err) &&
           synchronize(err);
  }
  bool synchronize(std::string &err) override {
    return check(cudaStreamSynchronize(gStream), err) &&
           (!copyStream || check(cudaStreamSynchronize(copyStream), err));
  }
  bool pinHost(void *p, size_t bytes, std::string &err) override {
    if (!p || bytes == 0)
      return true;
    return check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), err);
  }
  void unpinHost(void *p) override {
    if (p)
      cudaHostUnregister(p);
  }
  bool copyAsync(void *dst, const void *src, size_t bytes, int &handle,
                 std::string &err) override {
    if (!copyStream &&
        !check(cudaStreamCreateWithFlags(&copyStream, cudaStreamNonBlocking),
               err))
      return false;
    // The copy starts once the compute stream's work so far is done.
    cudaEvent_t after = event(err), done;
    if (!after || !check(cudaEventRecord(after, gStream), err) ||
        !check(cudaStreamWaitEvent(copyStream, after, 0), err))
      return false;
    recycle(after);
    if (bytes &&
        !check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copyStream),
               err))
      return false;
    if (!(done = event(err)) || !check(cudaEventRecord(done, copyStream), err))
      return false;
    handle = nextHandle++;
    pending[handle] = done;
    return true;
  }
  bool waitCopy(int handle, bool onHost, std::string &err) override {
    auto it = pending.find(handle);
    if (it == pending.end())
      return true;
    cudaEvent_t e = it->second;
    pending.erase(it);
    bool ok = onHost ? check(cudaEventSynchronize(e), err)
                     : check(cudaStreamWaitEvent(gStream, e, 0), err);
    recycle(e);
    return ok;
  }
  const KernelInfo *kernel(const std::string &name) const override {
    for (const KernelInfo &k : kCudaKernels)
      if (name == k.name)
        return &k;
    return nullptr;
  }
  std::vector<std::string> kernelNames() const override {
    std::vector<std::string> names;
    for (const KernelInfo &k : kCudaKernels)
      names.push_back(k.name);
    return names;
  }

  ~CudaDevice() override {
    for (auto &[h, e] : pending)
      cudaEventDestroy(e);
    for (cudaEvent_t e : spare)
      cudaEventDestroy(e);
  }

private:
  cudaStream_t copyStream = nullptr;
  std::map<int, cudaEvent_t> pending;
  std::vector<cudaEvent_t> spare; // events to reuse
  int nextHandle = 1;
  cudaEvent_t event(std::string &err) {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (!check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), err))
      return nullptr;
    return e;
  }
  void recycle(cudaEvent_t e) { spare.push_back(e); }
  static bool check(cudaError_t e, std::string &err) {
    if (e == cudaSuccess)
      return true;
    err = std::string("CUDA: ") + cudaGetErrorString(e);
    return false;
  }
};

} // namespace

bool builtWithCuda() { return true; }

bool cudaDeviceVisible() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Device> openCudaDevice(std::string &err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    err = std::string("no CUDA device is visible (") +
          (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
          "); use --backend=cpu";
    return nullptr;
  }
  // Ranks on one node take devices in turn: the launcher's local rank
  // (Open MPI, MVAPICH, Slurm, torchrun) modulo the visible devices.
  int local = 0;
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                          "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  auto d = std::make_unique<CudaDevice>();
  d->index = local % n;
  if (cudaSetDevice(d->index) != cudaSuccess ||
      cudaGetDeviceProperties(&d->prop, d->index) != cudaSuccess ||
      (!gStream && cudaStreamCreateWithFlags(&gStream, cudaStreamNonBlocking) !=
                       cudaSuccess)) {
    err = "cannot initialize CUDA device 0";
    return nullptr;
  }
  if (!openBlas(err))
    return nullptr;
  if (!gBlas && (gBlasApi.create(&gBlas) != CUBLAS_STATUS_SUCCESS ||
                 gBlasApi.setStream(gBlas, gStream) != CUBLAS_STATUS_SUCCESS)) {
    err = "cannot create a cuBLAS handle";
    return nullptr;
  }
  return d;
}

} // namespace ds::rt

//===- Linalg.cu - GEMMs through cuBLAS, softmax --------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// MatMul and Gemm call cuBLAS (opened with dlopen when a device is) with
// f32 accumulation for every storage type; softmax accumulates in double,
// as the CPU's Linalg.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "../PermutedGemm.h"

#include <cublas_v2.h>

#include <dlfcn.h>

namespace ds::rt::cuda {
namespace {

cublasHandle_t gBlas = nullptr;

/// cuBLAS, opened when a device is (ds-run without a GPU never loads it).
struct Blas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) setStream = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                         int, int, int, const void *, const void *,
                         cudaDataType, int, long long, const void *,
                         cudaDataType, int, long long, const void *, void *,
                         cudaDataType, int, long long, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
} gBlasApi;

bool openBlas(std::string &err) {
  if (gBlasApi.gemm)
    return true;
  void *lib = nullptr;
  for (const char *name :
       {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib) {
    err = std::string("cannot load cuBLAS (libcublas.so.13): ") + dlerror();
    return false;
  }
  gBlasApi.create = reinterpret_cast<decltype(gBlasApi.create)>(
      dlsym(lib, "cublasCreate_v2"));
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
            mx == -INFINITY ? NAN
            : logOut        ? v - log(sum)
                            : exp(v) / sum);
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
  return t == DType::F16    ? CUDA_R_16F
         : t == DType::BF16 ? CUDA_R_16BF
                            : CUDA_R_32F;
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
                 int64_t sA, const void *B, int64_t ldb, int64_t sB, float beta,
                 void *C, int64_t sC, int64_t batches) {
  return blasOk(ctx,
                gBlasApi.gemm(gBlas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                              ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M),
                              int(K), &alpha, B, cudaType(t), int(ldb), sB, A,
                              cudaType(t), int(lda), sA, &beta, C, cudaType(t),
                              int(N), sC, int(batches), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

/// A matmul whose operands the compiler left untransposed (perm_a/perm_b,
/// --ds-fold-transpose; geometry in PermutedGemm.h): the innermost batch
/// dimension is one strided batched call, the outer ones a loop.
bool matMulPermuted(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  if (a.dtype != b.dtype || a.dtype != o.dtype || !isFloatType(a.dtype))
    return ctx.fail("matmul operands must share one float type");
  PermutedGemm g;
  if (!planPermutedGemm(ctx, a, b, o, g))
    return false;
  size_t esize = dtypeSize(a.dtype);
  if (g.M * g.N * g.K == 0)
    return cudaMemsetAsync(o.data, 0, o.numel() * esize, gStream) ==
                   cudaSuccess
               ? true
               : launched(ctx);
  int64_t inner = g.batch.empty() ? 1 : g.batch.back();
  int64_t sA = g.batch.empty() ? 0 : g.strideA.back();
  int64_t sB = g.batch.empty() ? 0 : g.strideB.back();
  for (int64_t bi = 0; bi < g.batches; bi += inner) {
    int64_t oa, ob;
    g.offsets(bi, oa, ob);
    if (!gemmBatched(ctx, a.dtype, g.a.trans, g.b.trans, g.M, g.N, g.K, 1.0f,
                     static_cast<const char *>(a.data) + oa * esize, g.a.ld,
                     sA, static_cast<const char *>(b.data) + ob * esize,
                     g.b.ld, sB, 0.0f,
                     static_cast<char *>(o.data) + bi * g.M * g.N * esize,
                     g.M * g.N, inner))
      return false;
  }
  return true;
}

bool kMatMul(KernelContext &ctx) {
  if (hasOperandPerm(ctx))
    return matMulPermuted(ctx);
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
  std::vector<int64_t> aB(a.shape.begin(),
                          a.shape.end() - std::min<int64_t>(a.rank(), 2));
  std::vector<int64_t> bB(b.shape.begin(),
                          b.shape.end() - std::min<int64_t>(b.rank(), 2));
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
    uniform &=
        (sa[i] == 0) == (sa[r - 1] == 0) && (sb[i] == 0) == (sb[r - 1] == 0);
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
  // C starts as broadcast(c), scaled by beta in the GEMM.
  if (accumulate && !copyBroadcast(ctx, *c, o))
    return false;
  if (M * N == 0)
    return true;
  if (K == 0 && !accumulate)
    return cudaMemsetAsync(o.data, 0, M * N * dtypeSize(o.dtype), gStream) ==
                   cudaSuccess
               ? true
               : launched(ctx);
  return gemmBatched(ctx, a.dtype, ta, tb, M, N, K, alpha, a.data, a.shape[1],
                     0, b.data, b.shape[1], 0, accumulate ? beta : 0.0f, o.data,
                     0, 1);
}

} // namespace

bool openCublas(cudaStream_t stream, std::string &err) {
  if (!openBlas(err))
    return false;
  if (!gBlas && (gBlasApi.create(&gBlas) != CUBLAS_STATUS_SUCCESS ||
                 gBlasApi.setStream(gBlas, stream) != CUBLAS_STATUS_SUCCESS)) {
    err = "cannot create a cuBLAS handle";
    return false;
  }
  return true;
}

void registerLinalgKernels(KernelRegistry &r) {
  r.add("matmul", kMatMul);
  r.add("gemm", kGemm);
  r.add("softmax", kSoftmax<false>);
  r.add("log_softmax", kSoftmax<true>);
}

} // namespace ds::rt::cuda

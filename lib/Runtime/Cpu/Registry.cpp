//===- Registry.cpp - kernel registry, attributes, threads ----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "plan.pb.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace ds::rt {

// One entry per kernel id the compiler emits (ds op names without `ds.`),
// with the operand counts the loader checks.
static const KernelInfo kKernels[] = {
    {"add", 2, 2, 1, 1, kAdd},
    {"sub", 2, 2, 1, 1, kSub},
    {"mul", 2, 2, 1, 1, kMul},
    {"div", 2, 2, 1, 1, kDiv},
    {"pow", 2, 2, 1, 1, kPow},
    {"max", 2, 2, 1, 1, kMax},
    {"min", 2, 2, 1, 1, kMin},
    {"equal", 2, 2, 1, 1, kEqual},
    {"less", 2, 2, 1, 1, kLess},
    {"less_or_equal", 2, 2, 1, 1, kLessOrEqual},
    {"greater", 2, 2, 1, 1, kGreater},
    {"greater_or_equal", 2, 2, 1, 1, kGreaterOrEqual},
    {"and", 2, 2, 1, 1, kAnd},
    {"or", 2, 2, 1, 1, kOr},
    {"xor", 2, 2, 1, 1, kXor},
    {"neg", 1, 1, 1, 1, kNeg},
    {"abs", 1, 1, 1, 1, kAbs},
    {"exp", 1, 1, 1, 1, kExp},
    {"log", 1, 1, 1, 1, kLog},
    {"sqrt", 1, 1, 1, 1, kSqrt},
    {"reciprocal", 1, 1, 1, 1, kReciprocal},
    {"erf", 1, 1, 1, 1, kErf},
    {"tanh", 1, 1, 1, 1, kTanh},
    {"relu", 1, 1, 1, 1, kRelu},
    {"sigmoid", 1, 1, 1, 1, kSigmoid},
    {"not", 1, 1, 1, 1, kNot},
    {"cast", 1, 1, 1, 1, kCast},
    {"where", 3, 3, 1, 1, kWhere},
    {"dropout", 1, 1, 1, 2, kDropout},
    {"matmul", 2, 2, 1, 2, kMatMul},
    {"gemm", 2, 3, 1, 2, kGemm},
    {"softmax", 1, 1, 1, 1, kSoftmax},
    {"log_softmax", 1, 1, 1, 1, kLogSoftmax},
    {"layer_norm", 2, 3, 1, 1, kLayerNorm},
    {"softmax_cross_entropy_loss", 2, 3, 1, 2, kSoftmaxCrossEntropyLoss},
    {"nll_loss", 2, 3, 1, 1, kNllLoss},
    {"gather", 2, 2, 1, 1, kGather},
    {"expand", 1, 1, 1, 1, kExpand},
    {"transpose", 1, 1, 1, 1, kTranspose},
    {"concat", 1, 1 << 20, 1, 1, kConcat},
    {"split", 1, 1, 1, 1 << 20, kSplit},
    {"slice", 1, 1, 1, 1, kSlice},
    {"trilu", 1, 1, 1, 1, kTrilu},
    {"copy", 1, 1, 1, 1, kCopy},
    {"transfer", 1, 1, 1, 1, kCopy}, // offload; NVMe ends are the executor's
    {"range", 3, 3, 1, 1, kRange},
    {"reshape", 1, 1, 1, 1, kReshape},
    {"reduce_sum", 1, 1, 1, 1, kReduceSum},
    {"reduce_mean", 1, 1, 1, 1, kReduceMean},
    {"reduce_max", 1, 1, 1, 1, kReduceMax},
    {"gather_grad", 2, 2, 1, 1, kGatherGrad},
    {"layer_norm_grad", 3, 3, 3, 3, kLayerNormGrad},
    {"softmax_grad", 2, 2, 1, 1, kSoftmaxGrad},
    {"loss_grad", 3, 4, 1, 1, kLossGrad},
    {"vocab_gather", 2, 2, 1, 1, kVocabGather},
    {"tp_rows", 1, 1, 1, 1, kTpRows},
    {"sp_all_gather", 1, 1, 1, 1, kSpAllGather},
    {"sp_reduce_scatter", 1, 1, 1, 1, kSpReduceScatter},
    {"vocab_gather_grad", 2, 2, 1, 1, kVocabGatherGrad},
    {"vocab_cross_entropy", 2, 2, 2, 2, kVocabCrossEntropy},
    {"vocab_cross_entropy_grad", 4, 4, 1, 1, kVocabCrossEntropyGrad},
    {"slice_grad", 1, 1, 1, 1, kSliceGrad},
    {"adam", 5, 6, 3, 4, kAdam},
    {"sgd", 4, 5, 2, 3, kSgd},
    {"onnx_update", 5, 6, 2, 3, kOnnxUpdate},
    {"all_reduce", 1, 1, 1, 1, kAllReduce},
    {"all_gather", 1, 1, 1, 1, kAllGather},
    {"reduce_scatter", 1, 1, 1, 1, kReduceScatter},
    {"shard", 1, 1, 1, 1, kShard},
    {"wait", 1, 1 << 20, 0, 0, kWait},
    {"check_overflow", 1, 1 << 20, 1, 1, kCheckOverflow},
    {"pipe_send", 1, 1, 0, 0, kPipeSend},
    {"pipe_recv", 0, 0, 1, 1, kPipeRecv},
    {"pipe_mark", 0, 0, 0, 0, kPipeMark},
    {"tied_grad_sum", 2, 3, 1, 2, kTiedGradSum},
};

const KernelInfo *findKernel(const std::string &name) {
  for (const KernelInfo &k : kKernels)
    if (name == k.name)
      return &k;
  return nullptr;
}

std::vector<std::string> kernelNames() {
  std::vector<std::string> names;
  for (const KernelInfo &k : kKernels)
    names.push_back(k.name);
  return names;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

static const plan::Attribute *find(const plan::Instruction *ins,
                                   const char *name) {
  for (const plan::Attribute &a : ins->attributes())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool Attrs::has(const char *name) const { return find(ins, name) != nullptr; }

int64_t Attrs::getInt(const char *name, int64_t dflt) const {
  const plan::Attribute *a = find(ins, name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kI)
    return a->i();
  if (a->value_case() == plan::Attribute::kF)
    return static_cast<int64_t>(a->f());
  return dflt;
}

double Attrs::getFloat(const char *name, double dflt) const {
  const plan::Attribute *a = find(ins, name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kF)
    return a->f();
  if (a->value_case() == plan::Attribute::kI)
    return static_cast<double>(a->i());
  return dflt;
}

std::string Attrs::getString(const char *name, const std::string &dflt) const {
  const plan::Attribute *a = find(ins, name);
  return a && a->value_case() == plan::Attribute::kS ? a->s() : dflt;
}

std::vector<int64_t> Attrs::getInts(const char *name) const {
  const plan::Attribute *a = find(ins, name);
  if (!a || a->value_case() != plan::Attribute::kInts)
    return {};
  return {a->ints().values().begin(), a->ints().values().end()};
}

//===----------------------------------------------------------------------===//
// Shapes and dtypes
//===----------------------------------------------------------------------===//

bool gatherGeometry(KernelContext &ctx, const char *kernel,
                    const std::vector<int64_t> &table,
                    const TensorView &indices, int64_t gathered,
                    GatherGeometry &geo) {
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= static_cast<int64_t>(table.size()))
    return ctx.fail(std::string(kernel) + " axis out of range");
  geo.outer = prod(table, 0, axis);
  geo.dim = table[axis];
  geo.inner = prod(table, axis + 1, table.size());
  geo.count = indices.numel();
  if (gathered != geo.outer * geo.count * geo.inner)
    return ctx.fail(std::string(kernel) + " sizes do not match");
  for (int64_t j = 0; j < geo.count; ++j) {
    int64_t i = loadI(indices.data, indices.dtype, j);
    if (i < -geo.dim || i >= geo.dim)
      return ctx.fail(std::string(kernel) + " index " + std::to_string(i) +
                      " is outside [" + std::to_string(-geo.dim) + ", " +
                      std::to_string(geo.dim) + ")");
  }
  return true;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                      size_t outRank) {
  std::vector<int64_t> own = stridesOf(in), out(outRank, 0);
  size_t off = outRank - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    out[d + off] = in[d] == 1 ? 0 : own[d];
  return out;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::Bool: return "bool";
  }
  return "?";
}

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32: case DType::I32: return 4;
  case DType::F16: case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

//===----------------------------------------------------------------------===//
// Threads: a fixed pool; parallelFor splits a range into one chunk per
// thread, the caller taking the first.
//===----------------------------------------------------------------------===//

namespace {
class Pool {
public:
  ~Pool() { resize(1); }
  void resize(int n) {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
      ++generation;
    }
    cv.notify_all();
    for (std::thread &t : workers)
      t.join();
    workers.clear();
    stop = false;
    size = std::max(1, n);
    for (int i = 1; i < size; ++i)
      workers.emplace_back([this, i] { loop(i); });
  }
  int threads() const { return size; }
  void run(int64_t n, const std::function<void(int64_t, int64_t)> &fn) {
    int parts = static_cast<int>(std::min<int64_t>(size, n));
    {
      std::lock_guard<std::mutex> lock(m);
      job = &fn;
      total = n;
      active = parts;
      pending = parts - 1;
      ++generation;
    }
    cv.notify_all();
    fn(0, chunkEnd(0));
    std::unique_lock<std::mutex> lock(m);
    done.wait(lock, [&] { return pending == 0; });
    job = nullptr;
  }

private:
  int64_t chunkEnd(int i) const { return total * (i + 1) / active; }
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t, int64_t)> *fn;
      int64_t begin, end;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return generation != seen; });
        seen = generation;
        if (stop)
          return;
        if (!job || index >= active)
          continue;
        fn = job;
        begin = total * index / active;
        end = chunkEnd(index);
      }
      (*fn)(begin, end);
      std::lock_guard<std::mutex> lock(m);
      if (--pending == 0)
        done.notify_one();
    }
  }
  std::vector<std::thread> workers;
  std::mutex m;
  std::condition_variable cv, done;
  const std::function<void(int64_t, int64_t)> *job = nullptr;
  int64_t total = 0;
  int active = 0, pending = 0, size = 1;
  uint64_t generation = 0;
  bool stop = false;
};

Pool &pool() {
  static Pool p;
  return p;
}
std::mutex poolUse;
} // namespace

void setThreadCount(int threads) { pool().resize(threads); }
int threadCount() { return pool().threads(); }

void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  if (pool().threads() == 1 || n < 2 * std::max<int64_t>(grain, 1)) {
    fn(0, n);
    return;
  }
  // Kernels run one at a time; a nested call runs serially.
  std::unique_lock<std::mutex> lock(poolUse, std::try_to_lock);
  if (!lock.owns_lock()) {
    fn(0, n);
    return;
  }
  pool().run(n, fn);
}

} // namespace ds::rt

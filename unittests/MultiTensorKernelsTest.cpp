//===- MultiTensorKernelsTest.cpp - multi_adam/multi_sgd vs single kernels ===//
//
// Part of the ds project. The multi-tensor optimizer kernels
// (Cpu/MultiTensor.cpp) against N calls of the single `adam` and `sgd`
// kernels (Cpu/Optimizers.cpp), bit for bit: tensors smaller than a chunk,
// crossing chunk boundaries and larger than several chunks, at 1 and 3
// threads, Adam, Adam with L2 decay and AdamW, SGD with and without
// (Nesterov) momentum, several steps; in place and into other buffers; an
// overflowed step keeps everything. Bad operand counts fail with a message.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace ds::rt;

namespace {

using ds::rt::test::view;

const std::vector<int64_t> kSizes = {5, 16387, 1, 40000, 128, 16384};

std::vector<float> random(int64_t n, unsigned seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(g);
  return v;
}

struct Attr {
  const char *name;
  double value;
};

/// Runs kernel `name`; its error message, or "" on success.
std::string run(const char *name, std::vector<TensorView> in,
                std::vector<TensorView> out, const std::vector<Attr> &attrs,
                KernelContext::StepState *step = nullptr) {
  ds::plan::Instruction ins;
  for (const Attr &a : attrs) {
    auto *p = ins.add_attributes();
    p->set_name(a.name);
    p->set_f(a.value);
  }
  const KernelInfo *k = findKernel(name);
  if (!k)
    return std::string("no kernel ") + name;
  KernelContext ctx{std::move(in), std::move(out), Attrs(&ins), 0, {}, NAN,
                    nullptr};
  ctx.step = step;
  return k->fn(ctx) ? "" : (ctx.error.empty() ? "failed" : ctx.error);
}

/// Per tensor: param, grad, then `states` states.
using Tensors = std::vector<std::vector<std::vector<float>>>;

Tensors makeTensors(int states, unsigned seed) {
  Tensors t(kSizes.size());
  for (size_t i = 0; i < kSizes.size(); ++i)
    for (int g = 0; g < 2 + states; ++g)
      // The second moment is non-negative.
      t[i].push_back(random(kSizes[i], seed + 10 * i + g,
                            g == 3 ? 0.0f : -1.0f, 1.0f));
  return t;
}

/// One step of the single kernel per tensor, in place.
void singleStep(const char *name, Tensors &t, int states, int64_t step,
                const std::vector<Attr> &attrs) {
  for (size_t i = 0; i < t.size(); ++i) {
    int64_t n = kSizes[i];
    std::vector<TensorView> in, out;
    for (int g = 0; g < 2 + states; ++g)
      in.push_back(view(t[i][g], {n}));
    if (states == 0) // sgd without momentum: the buffer operand is unused
      in.push_back(view(t[i][1], {n}));
    in.push_back(view(&step, DType::I64, {}));
    out.push_back(view(t[i][0], {n}));
    for (int s = 0; s < states; ++s)
      out.push_back(view(t[i][2 + s], {n}));
    std::vector<float> unused(n);
    if (states == 0)
      out.push_back(view(unused, {n}));
    ASSERT_EQ(run(name, in, out, attrs), "");
  }
}

/// One step of the multi-tensor kernel over all tensors; `into` (when not
/// null) receives the results instead of the inputs' storage.
std::string multiStep(const char *name, Tensors &t, int states, int64_t step,
                      const std::vector<Attr> &attrs, Tensors *into = nullptr,
                      KernelContext::StepState *overflow = nullptr) {
  std::vector<TensorView> in, out;
  for (int g = 0; g < 2 + states; ++g)
    for (size_t i = 0; i < t.size(); ++i)
      in.push_back(view(t[i][g], {kSizes[i]}));
  in.push_back(view(&step, DType::I64, {}));
  Tensors &dst = into ? *into : t;
  for (int r = 0; r < 1 + states; ++r)
    for (size_t i = 0; i < t.size(); ++i)
      out.push_back(view(dst[i][r == 0 ? 0 : r + 1], {kSizes[i]}));
  return run(name, in, out, attrs, overflow);
}

int64_t mismatches(const Tensors &a, const Tensors &b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t g = 0; g < a[i].size(); ++g)
      bad += std::memcmp(a[i][g].data(), b[i][g].data(),
                         a[i][g].size() * sizeof(float)) != 0;
  return bad;
}

void expectSameAsSingle(const char *single, const char *multi, int states,
                        const std::vector<Attr> &attrs) {
  for (int threads : {1, 3}) {
    setThreadCount(threads);
    Tensors a = makeTensors(states, 7), b = a;
    for (int64_t step = 1; step <= 3; ++step) {
      singleStep(single, a, states, step, attrs);
      ASSERT_EQ(multiStep(multi, b, states, step, attrs), "");
      EXPECT_EQ(mismatches(a, b), 0)
          << multi << " step " << step << " threads " << threads;
    }
  }
  setThreadCount(1);
}

TEST(MultiTensorKernels, AdamMatchesSingleKernel) {
  expectSameAsSingle("adam", "multi_adam", 2, {{"lr", 1e-2}});
  expectSameAsSingle("adam", "multi_adam", 2,
                     {{"lr", 1e-2}, {"weight_decay", 0.1}});
  expectSameAsSingle("adam", "multi_adam", 2,
                     {{"lr", 1e-2}, {"weight_decay", 0.1}, {"decoupled", 1}});
}

TEST(MultiTensorKernels, SgdMatchesSingleKernel) {
  expectSameAsSingle("sgd", "multi_sgd", 0, {{"lr", 0.1}});
  expectSameAsSingle("sgd", "multi_sgd", 1,
                     {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1},
                      {"weight_decay", 0.01}});
  expectSameAsSingle("sgd", "multi_sgd", 1,
                     {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", 1}});
}

TEST(MultiTensorKernels, OtherOutputBuffersAndOverflow) {
  Tensors a = makeTensors(2, 11), b = a, out = makeTensors(2, 99);
  singleStep("adam", a, 2, 2, {{"lr", 1e-2}});
  ASSERT_EQ(multiStep("multi_adam", b, 2, 2, {{"lr", 1e-2}}, &out), "");
  for (size_t i = 0; i < a.size(); ++i) // the gradients are not outputs
    out[i][1] = a[i][1];
  EXPECT_EQ(mismatches(a, out), 0);
  // An overflowed step copies the inputs to the outputs.
  KernelContext::StepState overflow;
  overflow.overflow = true;
  Tensors c = makeTensors(2, 21), into = makeTensors(2, 22);
  ASSERT_EQ(multiStep("multi_adam", c, 2, 2, {{"lr", 1e-2}}, &into, &overflow),
            "");
  for (size_t i = 0; i < c.size(); ++i)
    into[i][1] = c[i][1];
  EXPECT_EQ(mismatches(c, into), 0);
}

TEST(MultiTensorKernels, BadOperandsFail) {
  std::vector<float> p(4), g(4), m(4), v(4);
  int64_t step = 1;
  // Three tensors for one parameter: not N params with 2 states each.
  EXPECT_NE(run("multi_adam",
                {view(p, {4}), view(g, {4}), view(m, {4}),
                 view(&step, DType::I64, {})},
                {view(p, {4}), view(m, {4}), view(v, {4})}, {{"lr", 1e-2}})
                .find("do not make N parameters"),
            std::string::npos);
  std::vector<float> small(3);
  EXPECT_NE(run("multi_adam",
                {view(p, {4}), view(small, {3}), view(m, {4}), view(v, {4}),
                 view(&step, DType::I64, {})},
                {view(p, {4}), view(m, {4}), view(v, {4})}, {{"lr", 1e-2}})
                .find("must be f32 of the parameter's size"),
            std::string::npos);
  int64_t zero = 0;
  EXPECT_NE(run("multi_adam",
                {view(p, {4}), view(g, {4}), view(m, {4}), view(v, {4}),
                 view(&zero, DType::I64, {})},
                {view(p, {4}), view(m, {4}), view(v, {4})}, {{"lr", 1e-2}})
                .find("is not >= 1"),
            std::string::npos);
}

} // namespace

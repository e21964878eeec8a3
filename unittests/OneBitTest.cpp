//===- OneBitTest.cpp - 1-bit compression against a naive reference -------===//
//
// Part of the ds project. The compressor of 1-bit Adam (Mpi/Compressed.h)
// against a reference written from DeepSpeed's formulas with plain loops
// and unpacked signs: packing (first element in the high bit), sign(0) =
// +1, the scale ||x|| / sqrt(n), the error feedback; then the compressed
// all-reduce on however many ranks run the binary (ctest: one; lit's
// test/E2E/onebit-adam.test: three under mpirun) against a simulation of
// every rank's part on each rank, over three exchanges so that the worker
// and server errors carry over; the same for the compressed reduce-scatter
// of ZeRO 1-3 (per-chunk scales and worker errors), the compressed
// all-gather of update deltas (int8 in blocks with the owner's error
// feedback, padding without error) and stage 3's int8 gather (block
// scales; within s/2): exact, the same arithmetic. The kernel
// compressed_reduce_scatter with 1-bit Adam's momentum operand (each
// rank's momentum, its warm-up and compressed steps) and
// onebit_adam_local's momentum_exchange against the same simulation.
// Tolerance: exact for signs and bits; 1e-6
// relative for scales and values (the reference sums the norm in the same
// double order, so they agree to the last bit in practice).
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "plan.pb.h"
#include "ds/Support/OneBit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace ds::rt;

namespace {

Communicator *gComm = nullptr;

/// The reference compressor: signs as +-1 floats.
struct Reference {
  std::vector<float> signs;
  float scale = 0;
};

Reference compressNaive(const std::vector<float> &values,
                        std::vector<float> &error) {
  size_t n = values.size();
  std::vector<float> x(n);
  double sumSq = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = values[i] + error[i];
    sumSq += double(x[i]) * x[i];
  }
  Reference r;
  r.scale = float(std::sqrt(sumSq) / std::sqrt(double(n)));
  r.signs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.signs[i] = x[i] >= 0.0f ? 1.0f : -1.0f; // sign(0) = +1
    error[i] = x[i] - r.scale * r.signs[i];
  }
  return r;
}

std::vector<float> values(int rank, int round, int64_t n) {
  std::vector<float> v(n);
  uint32_t s = 1234567u * (rank + 1) + 7919u * round;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = (float((s >> 8) & 0xffff) / 65536.0f - 0.5f) * (1 + rank);
  }
  if (n > 3)
    v[3] = 0.0f; // a zero: its sign is +1
  return v;
}

TEST(OneBitCompress, PackSignScaleAndError) {
  const int64_t n = 40;
  std::vector<float> v = values(0, 0, n);
  std::vector<float> error(n, 0.0f), errorRef(n, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    error[i] = errorRef[i] = 0.01f * float(i % 5) - 0.02f;
  std::vector<uint8_t> packed(n / 8);
  float scale = onebit::compress(v.data(), error.data(), n, packed.data());
  Reference ref = compressNaive(v, errorRef);
  EXPECT_NEAR(scale, ref.scale, 1e-6 * ref.scale);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(onebit::signAt(packed.data(), i), ref.signs[i]) << i;
    EXPECT_NEAR(error[i], errorRef[i], 1e-6 * std::fabs(ref.scale)) << i;
  }
  // The first element is the high bit of the first byte.
  EXPECT_EQ((packed[0] >> 7) & 1, ref.signs[0] > 0 ? 1 : 0);
}

TEST(OneBitCompress, ZeroIsPositiveAndErrorFeedsBack) {
  // All zeros: every sign +1, scale 0, no error.
  std::vector<float> zeros(16, 0.0f), error(16, 0.0f);
  std::vector<uint8_t> packed(2);
  EXPECT_EQ(onebit::compress(zeros.data(), error.data(), 16, packed.data()),
            0.0f);
  EXPECT_EQ(packed[0], 0xff);
  EXPECT_EQ(packed[1], 0xff);
  // x = (3, -1, 0, 0, 0, 0, 0, 0): scale sqrt(10/8); the error is what the
  // compression lost, and is added to the next input.
  std::vector<float> x = {3, -1, 0, 0, 0, 0, 0, 0}, e(8, 0.0f);
  std::vector<uint8_t> p(1);
  float s = onebit::compress(x.data(), e.data(), 8, p.data());
  EXPECT_FLOAT_EQ(s, float(std::sqrt(10.0 / 8.0)));
  EXPECT_EQ(p[0], 0xbf); // 1011 1111: only the second element is negative
  EXPECT_FLOAT_EQ(e[0], 3 - s);
  EXPECT_FLOAT_EQ(e[1], -1 + s);
  EXPECT_FLOAT_EQ(e[2], -s);
  std::vector<float> zero8(8, 0.0f);
  float s2 = onebit::compress(zero8.data(), e.data(), 8, p.data());
  double sum = 0;
  for (float v : {3 - s, -1 + s, -s, -s, -s, -s, -s, -s})
    sum += double(v) * v;
  EXPECT_FLOAT_EQ(s2, float(std::sqrt(sum / 8)));
}

TEST(OneBitCompress, PaddingFollowsDeepSpeed) {
  // A multiple of N lcm(N, 8): 8 for one rank, 72 for three, 16 for two.
  EXPECT_EQ(::ds::onebit::paddedSize(1, 1), 8);
  EXPECT_EQ(::ds::onebit::paddedSize(100, 3), 144);
  EXPECT_EQ(::ds::onebit::paddedSize(72, 3), 72);
  EXPECT_EQ(::ds::onebit::paddedSize(17, 2), 32);
  EXPECT_EQ(::ds::onebit::exchangeBytes(144, 3), 144u / 4 + 24u);
}

TEST(OneBitAllReduce, MatchesASimulationOfEveryRank) {
  int world = gComm->size(), rank = gComm->rank();
  const int64_t n = 100;
  int64_t padded = ::ds::onebit::paddedSize(n, world), chunk = padded / world;
  std::vector<float> we(padded, 0.0f), se(chunk, 0.0f);
  // The simulation: every rank's worker error and server error.
  std::vector<std::vector<float>> weRef(world, std::vector<float>(padded, 0)),
      seRef(world, std::vector<float>(chunk, 0));
  for (int round = 0; round < 3; ++round) {
    std::vector<float> m = values(rank, round, n);
    uint64_t bytes0 = gComm->collectiveBytes;
    std::string err;
    if (world == 1) { // the kernel does not exchange on one rank
      SUCCEED();
      return;
    }
    ASSERT_TRUE(onebit::compressedAllReduce(*gComm, m.data(), n, we.data(),
                                            padded, se.data(), err))
        << err;
    EXPECT_EQ(gComm->collectiveBytes - bytes0,
              ::ds::onebit::exchangeBytes(padded, world));
    std::vector<Reference> workers;
    for (int r = 0; r < world; ++r) {
      std::vector<float> x = values(r, round, n);
      x.resize(padded, 0.0f);
      workers.push_back(compressNaive(x, weRef[r]));
    }
    std::vector<float> expect(padded);
    for (int j = 0; j < world; ++j) {
      std::vector<float> y(chunk, 0.0f);
      for (int r = 0; r < world; ++r)
        for (int64_t k = 0; k < chunk; ++k)
          y[k] += workers[r].signs[j * chunk + k] *
                  (workers[r].scale * (1.0f / float(world)));
      Reference server = compressNaive(y, seRef[j]);
      for (int64_t k = 0; k < chunk; ++k)
        expect[j * chunk + k] = server.scale * server.signs[k];
    }
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(m[i], expect[i], 1e-6 * std::fabs(expect[i]))
          << "round " << round << ", element " << i;
    for (int64_t i = 0; i < padded; ++i)
      ASSERT_NEAR(we[i], weRef[rank][i], 1e-6) << "worker error " << i;
    for (int64_t k = 0; k < chunk; ++k)
      ASSERT_NEAR(se[k], seRef[rank][k], 1e-6) << "server error " << k;
  }
}

/// One rank's part of the compressed reduce-scatter, simulated: each
/// chunk j of `v` compressed with that rank's worker error `we` of chunk
/// j (updated); chunk `rank`'s decompressed share added to `expect`.
void simulateChunks(const std::vector<float> &v, std::vector<float> &we,
                    int64_t chunk, int world, int rank,
                    std::vector<float> &expect) {
  for (int j = 0; j < world; ++j) {
    std::vector<float> part(v.begin() + j * chunk,
                            v.begin() + (j + 1) * chunk);
    std::vector<float> e(we.begin() + j * chunk, we.begin() + (j + 1) * chunk);
    Reference c = compressNaive(part, e);
    std::copy(e.begin(), e.end(), we.begin() + j * chunk);
    if (j == rank)
      for (int64_t k = 0; k < chunk; ++k)
        expect[k] += c.signs[k] * (c.scale * (1.0f / float(world)));
  }
}

TEST(OneBitReduceScatter, MatchesASimulationOfEveryRank) {
  // ZeRO 1-3's exchange: chunks of 13 elements (not whole bytes), one
  // scale per chunk, the worker error per chunk, no server compression.
  int world = gComm->size(), rank = gComm->rank();
  const int64_t chunk = 13, n = chunk * world;
  std::vector<float> we(n, 0.0f), out(chunk);
  std::vector<std::vector<float>> weRef(world, std::vector<float>(n, 0));
  if (world == 1) { // the kernel copies its chunk on one rank
    SUCCEED();
    return;
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<float> in = values(rank, round, n);
    uint64_t bytes0 = gComm->collectiveBytes;
    std::string err;
    ASSERT_TRUE(onebit::compressedReduceScatter(*gComm, in.data(), chunk,
                                                we.data(), out.data(), err))
        << err;
    EXPECT_EQ(gComm->collectiveBytes - bytes0,
              ::ds::onebit::reduceScatterBytes(chunk, world));
    EXPECT_EQ(::ds::onebit::reduceScatterBytes(chunk, world),
              uint64_t(world) * (2 + 4)); // ceil(13 / 8) bytes + a scale
    // Rank r's chunk j, compressed with rank r's error of chunk j.
    std::vector<float> expect(chunk, 0.0f);
    for (int r = 0; r < world; ++r) {
      simulateChunks(values(r, round, n), weRef[r], chunk, world, rank,
                     expect);
    }
    for (int64_t k = 0; k < chunk; ++k)
      ASSERT_NEAR(out[k], expect[k], 1e-6 * std::fabs(expect[k]) + 1e-7)
          << "round " << round << ", element " << k;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(we[i], weRef[rank][i], 1e-6) << "worker error " << i;
  }
}

/// Runs kernel `name` on this rank with the communicator and attributes.
bool runKernel(const char *name, std::vector<TensorView> in,
               std::vector<TensorView> out, const ds::plan::Instruction &ins,
               std::string &error) {
  const KernelInfo *k = findKernel(name);
  if (!k) {
    error = std::string("no kernel ") + name;
    return false;
  }
  KernelContext ctx{std::move(in), std::move(out), Attrs(&ins), 0, {}, NAN,
                    gComm};
  bool ok = k->fn(ctx);
  error = ctx.error;
  return ok;
}

TensorView viewOf(std::vector<float> &v) {
  TensorView t;
  t.data = v.data();
  t.dtype = DType::F32;
  t.shape = {static_cast<int64_t>(v.size())};
  return t;
}

void setAttr(ds::plan::Instruction &ins, const char *name, double f,
             bool isInt) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  if (isInt)
    a->set_i(static_cast<int64_t>(f));
  else
    a->set_f(f);
}

TEST(OneBitMomentumReduceScatter, KernelMatchesASimulationOfEveryRank) {
  // 1-bit Adam's ZeRO 1-3 exchange, the kernel with its momentum operand
  // (freeze after step 2, beta1 0.9, five steps): every step each rank's
  // momentum is b1 m + (1-b1) g of its own gradient; warm-up steps give
  // the gradient's mean, frozen steps the 1-bit mean of the momenta with
  // the worker error per chunk. Then onebit_adam_local with
  // momentum_exchange takes the result as m after the freeze.
  int world = gComm->size(), rank = gComm->rank();
  const int64_t chunk = 13, n = chunk * world;
  const float b1 = 0.9f, a1 = float(1.0 - 0.9);
  ds::plan::Instruction ins;
  setAttr(ins, "freeze_step", 2, true);
  setAttr(ins, "beta1", 0.9, false);
  std::vector<float> we(n, 0.0f), mom(n, 0.0f), out(chunk);
  std::vector<std::vector<float>> weRef(world, std::vector<float>(n, 0)),
      momRef(world, std::vector<float>(n, 0));
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> in = values(rank, int(t), n);
    std::vector<int64_t> step{t};
    TensorView sv;
    sv.data = step.data();
    sv.dtype = DType::I64;
    sv.shape = {};
    std::string err;
    ASSERT_TRUE(runKernel("compressed_reduce_scatter",
                          {viewOf(in), viewOf(we), sv, viewOf(mom)},
                          {viewOf(out), viewOf(we), viewOf(mom)}, ins, err))
        << err;
    std::vector<float> expect(chunk, 0.0f);
    for (int r = 0; r < world; ++r) {
      std::vector<float> g = values(r, int(t), n);
      for (int64_t i = 0; i < n; ++i)
        momRef[r][i] = momRef[r][i] * b1 + g[i] * a1;
      for (int64_t k = 0; k < chunk && t <= 2; ++k)
        expect[k] += g[rank * chunk + k] / float(world);
      if (t <= 2)
        continue;
      if (world == 1) { // one rank: its own momentum, nothing compressed
        std::copy(momRef[0].begin(), momRef[0].begin() + chunk,
                  expect.begin());
        continue;
      }
      simulateChunks(momRef[r], weRef[r], chunk, world, rank, expect);
    }
    for (int64_t k = 0; k < chunk; ++k)
      ASSERT_NEAR(out[k], expect[k], 1e-6 * std::fabs(expect[k]) + 1e-6)
          << "step " << t << ", element " << k;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(mom[i], momRef[rank][i], 1e-6) << "momentum " << i;
      ASSERT_NEAR(we[i], weRef[rank][i], 1e-6) << "worker error " << i;
    }
    // The partition's update: after the freeze m is the exchanged momentum.
    ds::plan::Instruction up = ins;
    setAttr(up, "momentum_exchange", 1, true);
    setAttr(up, "lr", 0.01, false);
    std::vector<float> p(chunk, 1.0f), m(chunk, 0.5f), v(chunk, 0.25f);
    ASSERT_TRUE(runKernel("onebit_adam_local",
                          {viewOf(p), viewOf(out), viewOf(m), viewOf(v), sv},
                          {viewOf(p), viewOf(m), viewOf(v)}, up, err))
        << err;
    for (int64_t k = 0; k < chunk; ++k) {
      float mk = t > 2 ? out[k] : 0.5f * b1 + out[k] * a1;
      ASSERT_EQ(m[k], mk) << "step " << t << ", m " << k;
      ASSERT_NEAR(p[k], 1.0f - 0.01f * mk / (std::sqrt(v[k]) + 1e-8f), 1e-6)
          << "step " << t << ", p " << k;
    }
  }
}

/// The reference int8 block quantizer: blocks of 256, scale max |x| / 127
/// over the first `real` elements, round(x / s) s; the rest 0.
std::vector<float> quantizeNaive(const std::vector<float> &x, int64_t real) {
  int64_t c = static_cast<int64_t>(x.size());
  std::vector<float> out(c, 0.0f);
  for (int64_t b0 = 0; b0 < c; b0 += 256) {
    int64_t end = std::min<int64_t>(c, b0 + 256);
    float absMax = 0.0f;
    for (int64_t k = b0; k < std::min(end, real); ++k)
      absMax = std::max(absMax, std::fabs(x[k]));
    float s = absMax / 127.0f;
    for (int64_t k = b0; k < std::min(end, real); ++k)
      out[k] = s > 0.0f ? std::nearbyint(x[k] / s) * s : 0.0f;
  }
  return out;
}

TEST(DeltaAllGather, MatchesASimulationOfEveryRank) {
  // ZeRO 1-2's parameter exchange: every rank holds the same whole `base`
  // (3 chunks of 300: a whole block of 256 and a partial one; the last 9
  // elements padding), updates its chunk, and sends its delta plus its
  // error int8-quantized; every rank adds the dequantized deltas, so all
  // copies are the same. Three rounds, the next base the last result, so
  // the errors carry over.
  int world = gComm->size(), rank = gComm->rank();
  const int64_t chunk = 300, n = chunk * world, valid = n - 9;
  if (world == 1) { // the kernel copies its chunk on one rank
    SUCCEED();
    return;
  }
  std::vector<float> base = values(0, 9, n), err(chunk, 0.0f), out(n);
  std::vector<std::vector<float>> errRef(world, std::vector<float>(chunk, 0));
  for (int round = 0; round < 3; ++round) {
    auto updated = [&](int r) {
      std::vector<float> v = values(r, round, chunk);
      for (int64_t k = 0; k < chunk; ++k)
        v[k] = base[r * chunk + k] + 0.01f * v[k];
      return v;
    };
    std::vector<float> in = updated(rank);
    uint64_t bytes0 = gComm->collectiveBytes;
    std::string e;
    ASSERT_TRUE(onebit::compressedAllGather(*gComm, in.data(), base.data(),
                                            chunk, valid, err.data(),
                                            out.data(), e))
        << e;
    EXPECT_EQ(gComm->collectiveBytes - bytes0,
              ::ds::onebit::gatherBytes(chunk, world));
    EXPECT_EQ(::ds::onebit::gatherBytes(chunk, world),
              uint64_t(world) * (300 + 2 * 4));
    std::vector<float> expect(n);
    for (int r = 0; r < world; ++r) {
      std::vector<float> v = updated(r), x(chunk, 0.0f);
      int64_t real = std::clamp<int64_t>(valid - r * chunk, 0, chunk);
      for (int64_t k = 0; k < real; ++k)
        x[k] = v[k] - base[r * chunk + k] + errRef[r][k];
      std::vector<float> q = quantizeNaive(x, real);
      for (int64_t k = 0; k < chunk; ++k) {
        errRef[r][k] = x[k] - q[k]; // 0 for padding
        expect[r * chunk + k] = base[r * chunk + k] + q[k];
      }
    }
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[i], expect[i]) << "round " << round << ", element " << i;
    for (int64_t k = 0; k < chunk; ++k)
      ASSERT_EQ(err[k], errRef[rank][k]) << "gather error " << k;
    base = out;
  }
}

TEST(QuantizedAllGather, MatchesASimulationOfEveryRank) {
  // Stage 3's gathers: two pieces per rank (300 elements: a whole block
  // of 256 and a partial one; 5: one partial block), the first's last 7
  // gathered elements padding. Each block's scale is max |x| / 127 over
  // its real elements; values arrive as round(x / s) s, within s / 2 of
  // x; padding arrives as 0.
  int world = gComm->size(), rank = gComm->rank();
  const std::vector<int64_t> pieces = {300, 5};
  const std::vector<int64_t> valid = {300 * world - 7, 5 * world};
  const int64_t total = 305;
  auto input = [&](int r) {
    std::vector<float> v = values(r, 4, total);
    v[3] = 0.0f; // an exact zero stays zero
    return v;
  };
  std::vector<float> in = input(rank), out(total * world);
  if (world == 1) {
    SUCCEED();
    return;
  }
  uint64_t bytes0 = gComm->collectiveBytes;
  std::string e;
  ASSERT_TRUE(onebit::quantizedAllGather(*gComm, in.data(), pieces, valid,
                                         out.data(), e))
      << e;
  EXPECT_EQ(gComm->collectiveBytes - bytes0,
            ::ds::onebit::quantizedGatherBytes(pieces, world));
  EXPECT_EQ(::ds::onebit::quantizedGatherBytes(pieces, 1),
            uint64_t(300 + 2 * 4 + 5 + 4));
  for (int r = 0; r < world; ++r) {
    std::vector<float> v = input(r);
    int64_t offset = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      int64_t c = pieces[p];
      for (int64_t b0 = 0; b0 < c; b0 += 256) {
        int64_t end = std::min<int64_t>(c, b0 + 256);
        float absMax = 0.0f;
        for (int64_t k = b0; k < end; ++k)
          if (r * c + k < valid[p])
            absMax = std::max(absMax, std::fabs(v[offset + k]));
        float s = absMax / 127.0f;
        for (int64_t k = b0; k < end; ++k) {
          float got = out[r * total + offset + k];
          if (r * c + k >= valid[p]) {
            ASSERT_EQ(got, 0.0f) << "padding " << k;
            continue;
          }
          float q = std::nearbyint(v[offset + k] / s);
          ASSERT_EQ(got, q * s) << "rank " << r << ", piece " << p << ", "
                                << k;
          ASSERT_LE(std::fabs(got - v[offset + k]), 0.5f * s * 1.0001f);
        }
      }
      offset += c;
    }
  }
  EXPECT_EQ(out[rank * total + 3], 0.0f);
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string err;
  std::unique_ptr<Communicator> comm = createCommunicator(err);
  if (!comm) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 1;
  }
  gComm = comm.get();
  // Only rank 0 prints gtest's report; every rank's failures fail the run.
  if (comm->rank() != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  bool ok = comm->allOk(rc == 0);
  if (comm->rank() == 0)
    std::printf("onebit tests on %d ranks: %s\n", comm->size(),
                ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

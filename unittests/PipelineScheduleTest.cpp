//===- PipelineScheduleTest.cpp - pipeline schedules and their bubble -----===//
//
// Part of the ds project. Every schedule runs each micro-batch's forward
// and backward once per chunk, completes (no deadlock: a rank only waits
// for an item another rank runs earlier), and with equal stages (backward
// twice the forward) has the bubble of the formula.
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PipelineSchedule.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace {

TEST(PipelineSchedule, EveryItemOnceAndTheFormulaBubble) {
  for (const char *kind : {"gpipe", "1f1b", "interleaved"})
    for (int p : {2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16})
        for (int v : {1, 2, 3}) {
          bool inter = std::string(kind) == "interleaved";
          if (inter != (v > 1))
            continue;
          auto s = ds::pipelineSchedule(kind, p, m, v);
          if (inter && m % p) {
            EXPECT_TRUE(s.empty()) << "interleaved needs M a multiple of P";
            continue;
          }
          ASSERT_EQ(static_cast<int>(s.size()), p);
          for (int r = 0; r < p; ++r) {
            std::set<std::tuple<int, int, bool>> seen;
            for (const ds::PipeStep &x : s[r]) {
              EXPECT_EQ(x.chunk % p, r) << kind << " runs a chunk elsewhere";
              EXPECT_TRUE(seen.insert({x.chunk, x.micro, x.forward}).second);
              // A chunk's backward comes after its forward.
              if (!x.forward)
                EXPECT_TRUE(seen.count({x.chunk, x.micro, true}));
            }
            EXPECT_EQ(static_cast<int>(seen.size()), 2 * m * v);
          }
          std::vector<double> f(p * v, 1.0), b(p * v, 2.0);
          ds::PipeSimulation sim = ds::simulatePipeline(s, f, b);
          ASSERT_GT(sim.stepSeconds, 0) << kind << " p=" << p << " m=" << m
                                        << " deadlocks";
          double formula = double(p - 1) / double(v * m + p - 1);
          EXPECT_NEAR(sim.bubble, formula, 1e-12)
              << kind << " p=" << p << " m=" << m << " v=" << v;
        }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostPMinusSAlive) {
  auto s = ds::pipelineSchedule("1f1b", 4, 8);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ds::stashSlots(s[r]), 4 - r);
    // The arena holds the latest forward: the last stage copies nothing
    // aside, the others keep every alive micro-batch (the latest is saved
    // before an older one's backward restores).
    EXPECT_EQ(ds::stashCopies(s[r]), r == 3 ? 0 : 4 - r);
  }
  auto g = ds::pipelineSchedule("gpipe", 2, 4);
  EXPECT_EQ(ds::stashSlots(g[0]), 4);
  EXPECT_EQ(ds::stashCopies(g[1]), 4);
}

TEST(PipelineSchedule, UnknownKinds) {
  EXPECT_TRUE(ds::pipelineSchedule("zigzag", 2, 4).empty());
  EXPECT_TRUE(ds::pipelineSchedule("1f1b", 2, 0).empty());
  // A schedule whose items wait on each other is reported, not run.
  std::vector<std::vector<ds::PipeStep>> bad = {
      {{false, 0, 0}, {true, 0, 0}}, {{true, 0, 1}, {false, 0, 1}}};
  EXPECT_EQ(ds::simulatePipeline(bad, {1, 1}, {2, 2}).stepSeconds, 0);
}

} // namespace

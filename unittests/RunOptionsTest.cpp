//===- RunOptionsTest.cpp - the flag table of a run -----------------------===//
//
// Part of the ds project. ds-run's command line and --help derive from one
// table: every listed flag is in --help, both spellings of a value flag
// (--steps 3, --steps=3) land in the same field, and bad or missing values
// are refused with one line naming the flag.
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/RunOptions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace ds::rt;

namespace {

bool parse(std::vector<const char *> args, RunOptions &o, RunAction &action,
           std::string &err) {
  args.insert(args.begin(), "ds-run");
  return parseRunArguments(static_cast<int>(args.size()), args.data(), o,
                           action, err);
}

TEST(RunOptions, DefaultsAndBothSpellings) {
  RunOptions o;
  RunAction action;
  std::string err;
  ASSERT_TRUE(parse({"p.plan", "--steps", "3", "--seed=7", "--backend=cpu",
                     "--inputs", "a.npz", "--inputs=b=x.npy", "--profile"},
                    o, action, err))
      << err;
  EXPECT_EQ(action, RunAction::Run);
  EXPECT_EQ(o.planPath, "p.plan");
  EXPECT_EQ(o.steps, 3);
  EXPECT_EQ(o.seed, 7);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.inputs, (std::vector<std::string>{"a.npz", "b=x.npy"}));
  EXPECT_TRUE(o.profile);
  EXPECT_EQ(o.tokenInputs, "idx,targets");
  EXPECT_EQ(o.tokenDtype, "uint16");
  EXPECT_EQ(o.onNan, "stop");
  EXPECT_EQ(o.repeat, 1);
  EXPECT_TRUE(std::isnan(o.lr));
  EXPECT_GE(o.threads, 1);
}

TEST(RunOptions, RefusesWithOneLine) {
  struct Case {
    std::vector<const char *> args;
    std::string error;
  } cases[] = {
      {{"p", "--steps", "0"}, "--steps needs a positive integer, got '0'"},
      {{"p", "--on-nan"}, "--on-nan needs stop, skip or continue"},
      {{"p", "--on-nan=x"}, "--on-nan='x' is not one of stop, skip, continue"},
      {{"p", "--inject-overflow", "3,0"},
       "--inject-overflow needs positive run numbers, got '3,0'"},
      {{"p", "--frob"}, "unknown option '--frob' (see ds-run --help)"},
      {{"p", "q"}, "more than one plan given: 'p' and 'q'"},
      {{"p", "--save-every", "2"}, "--save-every needs --save DIR"},
      {{}, "no plan given (usage: ds-run PLAN --forward-only ...; see --help)"},
  };
  for (const Case &c : cases) {
    RunOptions o;
    RunAction action;
    std::string err;
    EXPECT_FALSE(parse(c.args, o, action, err));
    EXPECT_EQ(err, c.error);
  }
}

TEST(RunOptions, ActionsAndHelp) {
  RunOptions o;
  RunAction action;
  std::string err;
  ASSERT_TRUE(parse({"--list-kernels"}, o, action, err));
  EXPECT_EQ(action, RunAction::ListKernels);
  ASSERT_TRUE(parse({"-h"}, o, action, err));
  EXPECT_EQ(action, RunAction::Help);
  std::string usage = runUsage();
  for (const RunFlag &f : runFlags())
    if (!f.usage.empty())
      EXPECT_NE(usage.find("  " + f.usage + " "), std::string::npos)
          << f.names[0];
}

} // namespace

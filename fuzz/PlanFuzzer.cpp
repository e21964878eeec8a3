//===- PlanFuzzer.cpp - libFuzzer target: the plan.bin loader -------------===//
//
// Part of the ds project. An input whose first byte is even is a plan
// payload given a valid header (version, size, checksum), so that the
// consistency checks behind the header are reached; an odd one is a whole
// file as is. A plan that loads is described, measured and handed to the
// executor (which must refuse it cleanly: its weights source is absent).
//
//===----------------------------------------------------------------------===//

#include "FuzzFile.h"
#include "ds/Runtime/Runtime.h"
#include "ds/Support/PlanFootprint.h"

#include <google/protobuf/stubs/logging.h>
#include "ds/Support/PlanFormat.h"

#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  google::protobuf::SetLogHandler(nullptr); // errors come back as values
  if (size == 0)
    return 0;
  std::string file;
  if (data[0] % 2 == 0) {
    ds::PlanHeader h;
    h.version = ds::kPlanFormatVersion;
    h.payloadBytes = size - 1;
    h.checksum = ds::fnv1a64(data + 1, size - 1);
    unsigned char head[ds::kPlanHeaderBytes];
    ds::encodePlanHeader(h, head);
    file.assign(reinterpret_cast<char *>(head), ds::kPlanHeaderBytes);
    file.append(reinterpret_cast<const char *>(data + 1), size - 1);
  } else {
    file.assign(reinterpret_cast<const char *>(data + 1), size - 1);
  }
  std::string path = fuzzFile(file.data(), file.size(), ".plan");
  std::string err;
  std::shared_ptr<const ds::rt::Plan> plan = ds::rt::loadPlan(path, err);
  if (plan) {
    ds::rt::describe(*plan);
    ds::Footprint f = ds::rt::footprintOf(*plan);
    // The executor allocates what the plan declares: only plans of a
    // sensible size (a real plan of gigabytes is not a finding).
    if (f.total() < (uint64_t(256) << 20)) {
      ds::rt::ExecutorOptions options;
      auto exec = ds::rt::Executor::create(plan, options, err);
      (void)exec;
    }
  }
  return 0;
}

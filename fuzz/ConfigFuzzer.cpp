//===- ConfigFuzzer.cpp - libFuzzer target: DeepSpeed configs -------------===//
//
// Part of the ds project. ds-opt's ds_config.json reader and the batch
// triad on arbitrary bytes and world sizes.
//
//===----------------------------------------------------------------------===//

#include "FuzzFile.h"
#include "DeepSpeedConfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = fuzzFile(data, size, ".json");
  dsconfig::DeepSpeedConfig config;
  std::string err;
  if (dsconfig::readDeepSpeedConfig(path, config, err)) {
    int64_t micro = 0, accum = 0;
    for (int64_t world : {1, 3, 8})
      dsconfig::resolveBatch(config, world, micro, accum, err);
  }
  return 0;
}

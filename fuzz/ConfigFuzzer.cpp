//===- ConfigFuzzer.cpp - libFuzzer target: DeepSpeed configs -------------===//
//
// Part of the ds project. ds-opt's ds_config.json reader and the batch
// triad on arbitrary bytes and world sizes.
//
//===----------------------------------------------------------------------===//

#include "FuzzFile.h"
#include "ds/Pipeline/DeepSpeedConfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = fuzzFile(data, size, ".json");
  mlir::ds::DeepSpeedConfig config;
  if (llvm::Error e = mlir::ds::readDeepSpeedConfig(path, config)) {
    llvm::consumeError(std::move(e));
    return 0;
  }
  int64_t micro = 0, accum = 0;
  for (int64_t world : {1, 3, 8})
    llvm::consumeError(mlir::ds::resolveBatch(config, world, micro, accum));
  return 0;
}

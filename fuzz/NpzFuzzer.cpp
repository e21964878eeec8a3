//===- NpzFuzzer.cpp - libFuzzer target: the data readers -----------------===//
//
// Part of the ds project. The same bytes as an .npz archive, an .npy array
// and an ONNX TensorProto: each reader accepts or refuses them cleanly.
//
//===----------------------------------------------------------------------===//

#include "FuzzFile.h"
#include "ds/Runtime/Runtime.h"

#include <google/protobuf/stubs/logging.h>

#include <map>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  google::protobuf::SetLogHandler(nullptr); // errors come back as values
  std::string path = fuzzFile(data, size, ".data");
  std::string err, name;
  std::map<std::string, ds::rt::HostTensor> arrays;
  ds::rt::readNpz(path, arrays, err);
  ds::rt::readNpz(path, arrays, err, /*u2AsBf16=*/true);
  ds::rt::HostTensor t;
  ds::rt::readNpy(path, t, err);
  ds::rt::readTensorProto(path, name, t, err);
  return 0;
}

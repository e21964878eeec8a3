//===- FuzzFile.h - fuzz inputs as files ------------------------*- C++ -*-===//
//
// Part of the ds project. The loaders under test read files: each input is
// written to a per-process scratch file first.
//
//===----------------------------------------------------------------------===//

#ifndef DS_FUZZ_FUZZFILE_H
#define DS_FUZZ_FUZZFILE_H

#include <cstdio>
#include <string>
#include <unistd.h>

inline std::string fuzzFile(const void *data, size_t size,
                            const char *suffix) {
  std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string path =
      dir + "/ds-fuzz-" + std::to_string(getpid()) + suffix;
  if (FILE *f = std::fopen(path.c_str(), "wb")) {
    if (size)
      std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  return path;
}

#endif // DS_FUZZ_FUZZFILE_H

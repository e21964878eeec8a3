//===- TensorBoardWriter.cpp - TensorBoard event files by hand -----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// An event file is a sequence of TFRecords: the data's length (uint64,
// little-endian), the masked CRC-32C of those 8 bytes, the data, the masked
// CRC-32C of the data. Each record's data is a tensorflow.Event protobuf:
// wall_time (1, double), step (2, int64), file_version (3, string) or
// summary (5, Summary). A Summary holds repeated Value (1) of tag (1,
// string) and simple_value (2, float), which is what TensorBoard's scalar
// dashboard reads. The protobuf wire format is written by hand: the plan's
// protobuf library does not carry TensorFlow's messages.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ds::rt {

namespace {

/// CRC-32C's table (reflected polynomial 0x82F63B78).
const uint32_t *crcTable() {
  static uint32_t table[256];
  static bool ready = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)ready;
  return table;
}

void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

/// A field's key: its number and wire type (0 varint, 1 fixed64,
/// 2 length-delimited, 5 fixed32).
void putKey(std::string &out, int field, int wireType) {
  putVarint(out, static_cast<uint64_t>(field) << 3 | wireType);
}

void putBytes(std::string &out, int field, const std::string &bytes) {
  putKey(out, field, 2);
  putVarint(out, bytes.size());
  out += bytes;
}

template <typename T> void putFixed(std::string &out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T)); // little-endian hosts only (x86, arm64)
  out.append(b, sizeof(T));
}

double wallTime() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// An Event's wall_time and step.
std::string eventHeader(int64_t step) {
  std::string e;
  putKey(e, 1, 1);
  putFixed<double>(e, wallTime());
  putKey(e, 2, 0);
  putVarint(e, static_cast<uint64_t>(step));
  return e;
}

} // namespace

uint32_t crc32c(const void *data, size_t size) {
  const uint32_t *table = crcTable();
  const auto *p = static_cast<const unsigned char *>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file)
    std::fclose(file);
}

bool TensorBoardWriter::open(const std::string &dir, std::string &err) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  filePath = dir + "/events.out.tfevents." +
             std::to_string(static_cast<long long>(wallTime())) + "." + host +
             "." + std::to_string(getpid()) + ".0";
  file = std::fopen(filePath.c_str(), "wb");
  if (!file) {
    err = "tensorboard: cannot write '" + filePath + "': " +
          std::strerror(errno);
    return false;
  }
  std::string e = eventHeader(0);
  putBytes(e, 3, "brain.Event:2");
  if (!writeRecord(e) || !flush()) {
    err = "tensorboard: cannot write '" + filePath + "'";
    return false;
  }
  return true;
}

bool TensorBoardWriter::writeRecord(const std::string &data) {
  std::string r;
  uint64_t length = data.size();
  putFixed<uint64_t>(r, length);
  putFixed<uint32_t>(r, maskedCrc32c(r.data(), 8));
  r += data;
  putFixed<uint32_t>(r, maskedCrc32c(data.data(), data.size()));
  return std::fwrite(r.data(), 1, r.size(), file) == r.size();
}

bool TensorBoardWriter::addScalar(const std::string &tag, float value,
                                  int64_t step) {
  std::string v; // Summary.Value
  putBytes(v, 1, tag);
  putKey(v, 2, 5);
  putFixed<float>(v, value);
  std::string summary;
  putBytes(summary, 1, v);
  std::string e = eventHeader(step);
  putBytes(e, 5, summary);
  return file && writeRecord(e);
}

bool TensorBoardWriter::flush() { return file && std::fflush(file) == 0; }

} // namespace ds::rt

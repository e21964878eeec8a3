//===- DataFiles.cpp - .npy, .npz and ONNX TensorProto files --------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// .npz is a zip archive of .npy files. numpy writes entries stored (savez)
// or deflated (savez_compressed), with zip64 fields; the reader takes sizes
// and offsets from the central directory and inflates with zlib. The writer
// writes stored entries.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "PlanImpl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <onnx/onnx_pb.h>
#include <zlib.h>

#include <fstream>
#include <sstream>

namespace ds::rt {

bool readFile(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in);
}

namespace {

bool slurp(const std::string &path, std::string &out, std::string &err) {
  if (readFile(path, out))
    return true;
  err = "cannot open '" + path + "'";
  return false;
}

uint64_t le(const std::string &s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

bool parseNpy(const std::string &bytes, const std::string &what, HostTensor &t,
              bool u2AsBf16,
              std::string &err) {
  auto bad = [&](const std::string &m) {
    err = what + ": " + m;
    return false;
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    return bad("not a .npy array");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen = major == 1 ? le(bytes, 8, 2) : le(bytes, 8, 4);
  size_t start = major == 1 ? 10 : 12;
  if (start + headerLen > bytes.size())
    return bad("truncated .npy header");
  std::string header = bytes.substr(start, headerLen);
  auto field = [&](const std::string &key) -> std::string {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos)
      return "";
    size_t colon = header.find(':', k);
    return colon == std::string::npos ? "" : header.substr(colon + 1);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos)
    return bad("no dtype in the .npy header");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    return bad("Fortran-order arrays are not supported (use np.ascontiguousarray)");
  std::string shapeText = field("shape");
  size_t p1 = shapeText.find('('), p2 = shapeText.find(')');
  if (p1 == std::string::npos || p2 == std::string::npos)
    return bad("no shape in the .npy header");
  t.shape.clear();
  std::stringstream ss(shapeText.substr(p1 + 1, p2 - p1 - 1));
  std::string dim;
  while (std::getline(ss, dim, ',')) {
    size_t b = dim.find_first_not_of(" "), e = dim.find_last_not_of(" L");
    if (b == std::string::npos)
      continue;
    long long v = std::strtoll(dim.substr(b, e - b + 1).c_str(), nullptr, 10);
    if (v < 0 || v > (1LL << 40))
      return bad("dimension " + dim + " of the shape is negative or too large");
    t.shape.push_back(v);
  }
  // The element count (dimensions checked above) must stay below 2^56.
  {
    unsigned long long count = 1;
    for (int64_t d : t.shape)
      if (d != 0 && count > (1ULL << 56) / static_cast<unsigned long long>(d))
        return bad("the shape holds too many elements");
      else
        count *= static_cast<unsigned long long>(d);
  }
  bool f64 = false;
  char order = descr.empty() ? '?' : descr[0];
  std::string kind = descr.size() > 1 ? descr.substr(1) : "";
  if (order == '>')
    return bad("big-endian arrays are not supported");
  if (kind == "f4") t.dtype = DType::F32;
  else if (kind == "f2") t.dtype = DType::F16;
  else if (kind == "f8") { t.dtype = DType::F32; f64 = true; }
  else if (kind == "i8") t.dtype = DType::I64;
  else if (kind == "i4") t.dtype = DType::I32;
  else if (kind == "b1") t.dtype = DType::Bool;
  else if (kind == "u2" && u2AsBf16) t.dtype = DType::BF16; // ds's own files
  else
    return bad("unsupported dtype '" + descr +
               "' (ds reads f4, f8, f2, i8, i4, b1)");
  int64_t n = t.numel();
  size_t data = start + headerLen, width = f64 ? 8 : dtypeSize(t.dtype);
  if (bytes.size() - data < static_cast<size_t>(n) * width)
    return bad("array data is truncated");
  t.data.resize(n * dtypeSize(t.dtype));
  if (f64) {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes.data() + data + 8 * i, 8);
      float f = static_cast<float>(v);
      std::memcpy(t.data.data() + 4 * i, &f, 4);
    }
  } else if (!t.data.empty()) {
    std::memcpy(t.data.data(), bytes.data() + data, t.data.size());
  }
  return true;
}

std::string npyBytes(const HostTensor &t) {
  const char *descr = "";
  switch (t.dtype) {
  case DType::F32: descr = "<f4"; break;
  case DType::F16: descr = "<f2"; break;
  case DType::BF16: descr = "<u2"; break; // numpy has no bfloat16: raw bits
  case DType::I64: descr = "<i8"; break;
  case DType::I32: descr = "<i4"; break;
  case DType::Bool: descr = "|b1"; break;
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i)
    shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : (i + 1 < t.shape.size() ? ", " : ""));
  shape += ")";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char *>(t.data.data()), t.data.size());
  return out;
}

void put(std::string &s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s += static_cast<char>((v >> (8 * i)) & 0xff);
}

} // namespace

bool readNpy(const std::string &path, HostTensor &out, std::string &err) {
  std::string bytes;
  return slurp(path, bytes, err) && parseNpy(bytes, "'" + path + "'", out, false, err);
}

bool readNpz(const std::string &path, std::map<std::string, HostTensor> &out,
             std::string &err, bool u2AsBf16) {
  std::string z;
  if (!slurp(path, z, err))
    return false;
  auto bad = [&](const std::string &m) {
    err = "'" + path + "' is not a readable .npz: " + m;
    return false;
  };
  // End of central directory: the last 0x06054b50 signature.
  if (z.size() < 22)
    return bad("too short");
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;)
    if (le(z, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos)
    return bad("no zip directory");
  uint64_t entries = le(z, eocd + 10, 2), cdOffset = le(z, eocd + 16, 4);
  if (cdOffset == 0xffffffffULL || entries == 0xffff) {
    // zip64: locator just before the EOCD points at the zip64 EOCD.
    if (eocd < 20 || le(z, eocd - 20, 4) != 0x07064b50)
      return bad("zip64 locator missing");
    uint64_t z64 = le(z, eocd - 20 + 8, 8);
    if (z64 + 56 > z.size() || le(z, z64, 4) != 0x06064b50)
      return bad("zip64 directory missing");
    entries = le(z, z64 + 32, 8);
    cdOffset = le(z, z64 + 48, 8);
  }
  size_t at = cdOffset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > z.size() || le(z, at, 4) != 0x02014b50)
      return bad("broken directory entry");
    uint64_t method = le(z, at + 10, 2);
    uint64_t csize = le(z, at + 20, 4), usize = le(z, at + 24, 4);
    size_t nameLen = le(z, at + 28, 2), extraLen = le(z, at + 30, 2),
           commentLen = le(z, at + 32, 2);
    uint64_t local = le(z, at + 42, 4);
    std::string name = z.substr(at + 46, nameLen);
    // zip64 extra field: sizes and offset that overflowed 32 bits.
    size_t x = at + 46 + nameLen, xend = x + extraLen;
    while (x + 4 <= xend && xend <= z.size()) {
      uint64_t id = le(z, x, 2), len = le(z, x + 2, 2);
      if (id == 1) {
        size_t q = x + 4;
        if (usize == 0xffffffffULL) { usize = le(z, q, 8); q += 8; }
        if (csize == 0xffffffffULL) { csize = le(z, q, 8); q += 8; }
        if (local == 0xffffffffULL) { local = le(z, q, 8); }
      }
      x += 4 + len;
    }
    at = xend + commentLen;
    if (local + 30 > z.size() || le(z, local, 4) != 0x04034b50)
      return bad("broken entry '" + name + "'");
    size_t data = local + 30 + le(z, local + 26, 2) + le(z, local + 28, 2);
    if (data + csize > z.size())
      return bad("entry '" + name + "' is truncated");
    std::string npy;
    if (method == 0) {
      npy = z.substr(data, csize);
    } else if (method == 8) {
      // Deflate expands at most 1032:1; a larger claim is a broken file
      // (and would be allocated before anything is read).
      if (usize > 1032 * static_cast<uint64_t>(csize) + 1024 ||
          usize > 0xffffffffULL)
        return bad("entry '" + name + "' claims " + std::to_string(usize) +
                   " bytes from " + std::to_string(csize) + " compressed");
      npy.resize(usize);
      z_stream s{};
      if (inflateInit2(&s, -MAX_WBITS) != Z_OK)
        return bad("zlib");
      s.next_in = reinterpret_cast<Bytef *>(&z[data]);
      s.avail_in = static_cast<uInt>(csize);
      s.next_out = reinterpret_cast<Bytef *>(&npy[0]);
      s.avail_out = static_cast<uInt>(usize);
      int rc = inflate(&s, Z_FINISH);
      inflateEnd(&s);
      if (rc != Z_STREAM_END)
        return bad("entry '" + name + "' does not inflate");
    } else {
      return bad("entry '" + name + "' uses compression method " +
                 std::to_string(method));
    }
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    HostTensor t;
    if (!parseNpy(npy, "'" + path + "' array '" + name + "'", t, u2AsBf16, err))
      return false;
    out[name] = std::move(t);
  }
  return true;
}

bool writeAtomically(const std::string &path, const std::string &bytes,
                     std::string &err) {
  // A temporary beside the target, synced, then renamed over it, and the
  // folder synced: after a crash the file is the old one or the new one.
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ok && ::fsync(fd) == 0;
  if (fd >= 0)
    ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = "cannot write '" + path + "': " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (int d = ::open(dir.c_str(), O_RDONLY); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return true;
}

bool encodeNpz(const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
               std::string &zip, std::string &err) {
  std::string dir;
  zip.clear();
  for (const auto &[name, tensor] : arrays) {
    std::string file = name + ".npy", data = npyBytes(*tensor);
    uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef *>(data.data()),
              static_cast<uInt>(data.size())));
    if (zip.size() > 0xffffffffULL || data.size() > 0xffffffffULL) {
      err = "npz arrays over 4 GiB are not supported";
      return false;
    }
    // The fields the local header and the central directory entry share:
    // version needed 2.0, no flags, stored, 1980-01-01, crc, sizes, name.
    auto putEntry = [&](std::string &buf) {
      put(buf, 20, 2); put(buf, 0, 2); put(buf, 0, 2); put(buf, 0, 2);
      put(buf, 0x21, 2); put(buf, crc, 4); put(buf, data.size(), 4);
      put(buf, data.size(), 4); put(buf, file.size(), 2); put(buf, 0, 2);
    };
    uint64_t offset = zip.size();
    put(zip, 0x04034b50, 4);
    putEntry(zip);
    zip += file;
    zip += data;
    put(dir, 0x02014b50, 4); put(dir, 20, 2); // made by: version 2.0
    putEntry(dir);
    // comment, disk, internal and external attributes, header offset.
    put(dir, 0, 2); put(dir, 0, 2); put(dir, 0, 2); put(dir, 0, 4);
    put(dir, offset, 4);
    dir += file;
  }
  uint64_t cd = zip.size();
  zip += dir;
  put(zip, 0x06054b50, 4); put(zip, 0, 2); put(zip, 0, 2);
  put(zip, arrays.size(), 2); put(zip, arrays.size(), 2);
  put(zip, dir.size(), 4); put(zip, cd, 4); put(zip, 0, 2);
  return true;
}

bool writeNpz(const std::string &path,
              const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
              std::string &err) {
  std::string zip;
  if (!encodeNpz(arrays, zip, err)) {
    err = "'" + path + "': " + err;
    return false;
  }
  return writeAtomically(path, zip, err);
}


bool writeSafetensors(
    const std::string &path,
    const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
    std::string &err) {
  std::string header = "{", data;
  for (const auto &[name, t] : arrays) {
    const char *dt = "F32";
    switch (t->dtype) {
    case DType::F32: dt = "F32"; break;
    case DType::F16: dt = "F16"; break;
    case DType::BF16: dt = "BF16"; break;
    case DType::I64: dt = "I64"; break;
    case DType::I32: dt = "I32"; break;
    case DType::Bool: dt = "BOOL"; break;
    }
    std::string shape;
    for (size_t i = 0; i < t->shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(t->shape[i]);
    if (header.size() > 1)
      header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + dt + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t->data.size()) + "]}";
    data.append(reinterpret_cast<const char *>(t->data.data()), t->data.size());
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  put(out, header.size(), 8);
  out += header;
  out += data;
  return writeAtomically(path, out, err);
}

bool writeOnnxWithWeights(
    const std::string &source, const std::string &path,
    const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
    std::string &err) {
  std::string bytes;
  if (!slurp(source, bytes, err))
    return false;
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    err = "'" + source + "' is not an ONNX model";
    return false;
  }
  std::map<std::string, const HostTensor *> byName(arrays.begin(), arrays.end());
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(t.name());
    if (it == byName.end())
      continue;
    // In the initializer's own type (the f32 master copy of a weight that
    // the model stores in 16 bits is converted back).
    const HostTensor *value = it->second;
    HostTensor converted;
    if (t.data_type() != onnxType(value->dtype)) {
      bool known = false;
      for (DType d : {DType::F32, DType::F16, DType::BF16})
        if (t.data_type() == onnxType(d)) {
          converted = *value;
          known = convertTensor(converted, d, err);
          if (!known)
            return false;
        }
      if (!known) {
        err = "initializer '" + t.name() + "' of '" + source +
              "' has another type than the trained " + dtypeName(value->dtype) +
              " weight";
        return false;
      }
      value = &converted;
    }
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(value->data.data(), value->data.size());
    byName.erase(it);
  }
  if (!byName.empty()) {
    err = "'" + source + "' has no initializer '" + byName.begin()->first + "'";
    return false;
  }
  std::string out;
  if (!model.SerializeToString(&out)) {
    err = "cannot serialize '" + path + "' (ONNX files are limited to 2 GiB)";
    return false;
  }
  return writeAtomically(path, out, err);
}

bool readTensorProto(const std::string &path, std::string &name,
                     HostTensor &out, std::string &err) {
  std::string bytes;
  if (!slurp(path, bytes, err))
    return false;
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) {
    err = "'" + path + "' is not an ONNX TensorProto";
    return false;
  }
  name = t.name();
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT: out.dtype = DType::F32; break;
  case onnx::TensorProto::FLOAT16: out.dtype = DType::F16; break;
  case onnx::TensorProto::BFLOAT16: out.dtype = DType::BF16; break;
  case onnx::TensorProto::INT64: out.dtype = DType::I64; break;
  case onnx::TensorProto::INT32: out.dtype = DType::I32; break;
  case onnx::TensorProto::BOOL: out.dtype = DType::Bool; break;
  case onnx::TensorProto::DOUBLE: out.dtype = DType::F32; break;
  // ONNX's own test data stores bfloat16 tensors as UINT16 bits.
  case onnx::TensorProto::UINT16: out.dtype = DType::BF16; break;
  default:
    err = "'" + path + "' has an unsupported element type";
    return false;
  }
  out.shape.assign(t.dims().begin(), t.dims().end());
  // The shape is checked, and the values it needs must be there, before
  // anything is allocated.
  unsigned long long count = 1;
  for (int64_t d : out.shape) {
    if (d < 0 || d > (int64_t(1) << 40) ||
        (d != 0 && count > (1ULL << 56) / static_cast<unsigned long long>(d))) {
      err = "'" + path + "' has an invalid shape";
      return false;
    }
    count *= static_cast<unsigned long long>(d);
  }
  int64_t n = out.numel();
  size_t es = dtypeSize(out.dtype);
  {
    bool isDouble = t.data_type() == onnx::TensorProto::DOUBLE;
    unsigned long long have =
        t.has_raw_data() ? t.raw_data().size() / (isDouble ? 8 : es)
        : isDouble       ? t.double_data_size()
        : out.dtype == DType::F32 ? t.float_data_size()
        : out.dtype == DType::I64 ? t.int64_data_size()
                                  : t.int32_data_size();
    if (have < static_cast<unsigned long long>(n)) {
      err = "'" + path + "' holds " + std::to_string(have) +
            " values, its shape needs " + std::to_string(n);
      return false;
    }
  }
  out.data.assign(n * es, 0);
  if (t.data_type() == onnx::TensorProto::DOUBLE) {
    for (int64_t i = 0; i < n; ++i) {
      double v = t.has_raw_data() ? 0 : (i < t.double_data_size() ? t.double_data(i) : 0);
      if (t.has_raw_data() && t.raw_data().size() >= static_cast<size_t>(8 * n))
        std::memcpy(&v, t.raw_data().data() + 8 * i, 8);
      float f = static_cast<float>(v);
      std::memcpy(out.data.data() + 4 * i, &f, 4);
    }
    return true;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != out.data.size()) {
      err = "'" + path + "' holds " + std::to_string(t.raw_data().size()) +
            " bytes, its shape needs " + std::to_string(out.data.size());
      return false;
    }
    std::memcpy(out.data.data(), t.raw_data().data(), out.data.size());
    return true;
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (out.dtype) {
    case DType::F32:
      if (i >= t.float_data_size()) goto shortData;
      storeD(out.data.data(), out.dtype, i, t.float_data(i));
      break;
    case DType::I64:
      if (i >= t.int64_data_size()) goto shortData;
      storeI(out.data.data(), out.dtype, i, t.int64_data(i));
      break;
    case DType::F16:
    case DType::BF16: {
      if (i >= t.int32_data_size()) goto shortData;
      uint16_t h = static_cast<uint16_t>(t.int32_data(i));
      std::memcpy(out.data.data() + 2 * i, &h, 2);
      break;
    }
    default:
      if (i >= t.int32_data_size()) goto shortData;
      storeI(out.data.data(), out.dtype, i, t.int32_data(i));
    }
  }
  return true;
shortData:
  err = "'" + path + "' holds fewer values than its shape needs";
  return false;
}

} // namespace ds::rt

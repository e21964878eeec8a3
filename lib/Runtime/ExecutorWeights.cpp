//===- ExecutorWeights.cpp - loading parameters from the weights source ---===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The weights source is the ONNX model the plan was compiled from. It is
// scanned for initializers without being held whole, checked against the
// plan's size and hash, and each rank reads only its tensor-parallel slice
// and ZeRO shard of each parameter, converting float types where mixed
// precision stores them in another.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"
#include "TpSlice.h"
#include "ds/Support/PlanFormat.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>

namespace ds::rt {

namespace {

/// An initializer found by scanning the ONNX file: its TensorProto without
/// raw_data, and where raw_data lies in the file. The file is never held
/// whole: a ZeRO-3 rank then reads only its shard's bytes.
struct InitializerRef {
  onnx::TensorProto header;
  bool hasRaw = false;
  uint64_t rawOffset = 0, rawBytes = 0;
};

/// Elements [first, first + count) of an ONNX initializer of `total`
/// elements, row-major little-endian (bool: one byte per element), into
/// `dst`. A ZeRO-3 rank reads its shard only: for external data just
/// those bytes of the file.
bool initializerBytes(const InitializerRef &ref, const std::string &path,
                      const std::string &onnxDir, DType dtype, int64_t total,
                      int64_t first, int64_t count, unsigned char *dst,
                      std::string &err) {
  const onnx::TensorProto &t = ref.header;
  std::string what = "initializer '" + t.name() + "'";
  size_t esize = dtypeSize(dtype);
  uint64_t bytes = static_cast<uint64_t>(total) * esize;
  uint64_t skip = static_cast<uint64_t>(first) * esize;
  uint64_t take = static_cast<uint64_t>(count) * esize;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0, length = bytes;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::strtoull(kv.value().c_str(), nullptr, 10);
      else if (kv.key() == "length")
        length = std::strtoull(kv.value().c_str(), nullptr, 10);
    }
    if (location.empty() || location[0] == '/' ||
        location.find("..") != std::string::npos) {
      err = what + " has an invalid external data location";
      return false;
    }
    std::ifstream in(onnxDir + "/" + location, std::ios::binary);
    if (!in || length != bytes) {
      err = what + ": cannot read " + std::to_string(bytes) + " bytes from '" +
            location + "'";
      return false;
    }
    in.seekg(static_cast<std::streamoff>(offset + skip));
    in.read(reinterpret_cast<char *>(dst), static_cast<std::streamsize>(take));
    if (!in) {
      err = what + ": external data file '" + location + "' is too short";
      return false;
    }
    return true;
  }
  if (ref.hasRaw) {
    // Only these bytes of the model file.
    if (ref.rawBytes != bytes) {
      err = what + " holds " + std::to_string(ref.rawBytes) +
            " bytes, the plan expects " + std::to_string(bytes);
      return false;
    }
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(ref.rawOffset + skip));
    in.read(reinterpret_cast<char *>(dst), static_cast<std::streamsize>(take));
    if (!in) {
      err = "cannot read " + what + " from '" + path + "'";
      return false;
    }
    return true;
  }
  auto checkCount = [&](int have) {
    if (have == total)
      return true;
    err = what + " holds " + std::to_string(have) + " values, the plan expects " +
          std::to_string(total);
    return false;
  };
  switch (dtype) {
  case DType::F32:
    if (!checkCount(t.float_data_size()))
      return false;
    std::memcpy(dst, t.float_data().data() + first, take);
    return true;
  case DType::I64:
    if (!checkCount(t.int64_data_size()))
      return false;
    std::memcpy(dst, t.int64_data().data() + first, take);
    return true;
  default:
    if (!checkCount(t.int32_data_size()))
      return false;
    for (int64_t i = 0; i < count; ++i) {
      int32_t v = t.int32_data(static_cast<int>(first + i));
      if (dtype == DType::F16 || dtype == DType::BF16) {
        uint16_t h = static_cast<uint16_t>(v);
        std::memcpy(dst + 2 * i, &h, 2);
      } else {
        storeI(dst, dtype, i, v);
      }
    }
    return true;
  }
}

/// Copies one field (tag already read) from `in` to `out`.
bool copyField(google::protobuf::io::CodedInputStream &in, uint32_t tag,
               google::protobuf::io::CodedOutputStream &out) {
  using WFL = google::protobuf::internal::WireFormatLite;
  out.WriteTag(tag);
  switch (WFL::GetTagWireType(tag)) {
  case WFL::WIRETYPE_VARINT: {
    uint64_t v;
    if (!in.ReadVarint64(&v))
      return false;
    out.WriteVarint64(v);
    return true;
  }
  case WFL::WIRETYPE_FIXED64: {
    uint64_t v;
    if (!in.ReadLittleEndian64(&v))
      return false;
    out.WriteLittleEndian64(v);
    return true;
  }
  case WFL::WIRETYPE_FIXED32: {
    uint32_t v;
    if (!in.ReadLittleEndian32(&v))
      return false;
    out.WriteLittleEndian32(v);
    return true;
  }
  case WFL::WIRETYPE_LENGTH_DELIMITED: {
    uint32_t n;
    std::string bytes;
    if (!in.ReadVarint32(&n) || !in.ReadString(&bytes, static_cast<int>(n)))
      return false;
    out.WriteVarint32(n);
    out.WriteString(bytes);
    return true;
  }
  default:
    return false;
  }
}

/// Scans `path` (an ONNX ModelProto) for graph initializers, keeping each
/// one's header and the file range of its raw_data; also hashes the file.
bool scanInitializers(const std::string &path,
                      std::map<std::string, InitializerRef> &out,
                      uint64_t &size, uint64_t &hash, std::string &err) {
  using WFL = google::protobuf::internal::WireFormatLite;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      err = "cannot read the weights source '" + path + "'";
      return false;
    }
    std::vector<char> chunk(1 << 22);
    hash = 0xcbf29ce484222325ULL;
    size = 0;
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      std::streamsize got = in.gcount();
      hash = fnv1a64(chunk.data(), static_cast<size_t>(got), hash);
      size += static_cast<uint64_t>(got);
    }
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    err = "cannot read the weights source '" + path + "'";
    return false;
  }
  bool ok = true;
  {
    google::protobuf::io::FileInputStream file(fd);
    google::protobuf::io::CodedInputStream in(&file);
    in.SetTotalBytesLimit(INT32_MAX);
    auto skip = [&](uint32_t tag) { return WFL::SkipField(&in, tag); };
    uint32_t tag;
    while (ok && (tag = in.ReadTag()) != 0) {
      if (WFL::GetTagFieldNumber(tag) != 7 ||
          WFL::GetTagWireType(tag) != WFL::WIRETYPE_LENGTH_DELIMITED) {
        ok = skip(tag);
        continue;
      }
      uint32_t graphBytes;
      ok = in.ReadVarint32(&graphBytes);
      auto graphLimit = in.PushLimit(static_cast<int>(graphBytes));
      while (ok && (tag = in.ReadTag()) != 0) {
        if (WFL::GetTagFieldNumber(tag) != 5 ||
            WFL::GetTagWireType(tag) != WFL::WIRETYPE_LENGTH_DELIMITED) {
          ok = skip(tag);
          continue;
        }
        uint32_t tensorBytes;
        ok = in.ReadVarint32(&tensorBytes);
        auto tensorLimit = in.PushLimit(static_cast<int>(tensorBytes));
        InitializerRef ref;
        std::string header;
        {
          google::protobuf::io::StringOutputStream hs(&header);
          google::protobuf::io::CodedOutputStream hout(&hs);
          while (ok && (tag = in.ReadTag()) != 0) {
            if (WFL::GetTagFieldNumber(tag) == 9 &&
                WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED) {
              uint32_t n;
              ok = in.ReadVarint32(&n);
              ref.hasRaw = true;
              ref.rawOffset = static_cast<uint64_t>(in.CurrentPosition());
              ref.rawBytes = n;
              ok = ok && in.Skip(static_cast<int>(n));
            } else {
              ok = copyField(in, tag, hout);
            }
          }
        }
        ok = ok && in.ConsumedEntireMessage() &&
             ref.header.ParseFromString(header);
        in.PopLimit(tensorLimit);
        if (ok)
          out[ref.header.name()] = std::move(ref);
      }
      ok = ok && in.ConsumedEntireMessage();
      in.PopLimit(graphLimit);
    }
  }
  ::close(fd);
  if (!ok)
    err = "the weights source '" + path + "' is not an ONNX model";
  return ok;
}

} // namespace

/// The weights source, scanned: its initializers by name.
struct WeightsSource {
  std::string path, onnxDir;
  std::map<std::string, InitializerRef> inits;
};

int onnxType(DType t) {
  switch (t) {
  case DType::F32: return onnx::TensorProto::FLOAT;
  case DType::F16: return onnx::TensorProto::FLOAT16;
  case DType::BF16: return onnx::TensorProto::BFLOAT16;
  case DType::I64: return onnx::TensorProto::INT64;
  case DType::I32: return onnx::TensorProto::INT32;
  case DType::Bool: return onnx::TensorProto::BOOL;
  }
  return 0;
}

bool Executor::Impl::layoutParameters(int rank, std::string &err) {
  const plan::Plan &pp = p();
  // One block per location: device, host, and the NVMe slots' host copy
  // (freed once they are written to the swap file).
  uint64_t totals[3] = {0, 0, 0};
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> slotBytes;
  for (const plan::Parameter &param : pp.parameters()) {
    uint64_t n = dtypeSize(toDType(param.dtype()));
    for (int64_t d : param.shape())
      n *= d;
    int loc = static_cast<int>(param.location());
    location.push_back(loc);
    nvmeSlot.push_back(loc == 2 ? static_cast<int>(slotBytes.size()) : -1);
    if (loc == 2)
      slotBytes.push_back(n);
    offsets.push_back(totals[loc]);
    paramSize.push_back(n);
    totals[loc] += (n + 63) / 64 * 64;
    if (totals[loc] > (uint64_t(1) << 60)) { // each size is below 2^56
      err = "the plan's parameters need more than 2^60 bytes";
      return false;
    }
  }
  if (!slotBytes.empty()) {
    // Refused before anything is loaded: a missing, read-only or full
    // folder.
    NvmeOptions no;
    no.dir = options.nvmePath.empty() ? pp.nvme().path() : options.nvmePath;
    no.blockSize = pp.nvme().block_size();
    no.queueDepth = pp.nvme().queue_depth();
    no.threads = std::max<uint32_t>(1, pp.nvme().threads());
    no.rank = rank;
    no.pretendFree = options.nvmePretendFree;
    nvme = NvmeStore::open(no, slotBytes, err);
    if (!nvme)
      return false;
  }
  params = alignedAlloc(totals[0]);
  hostParams = alignedAlloc(totals[1]);
  if (totals[2])
    nvmeShadow = alignedAlloc(totals[2]);
  if (!params || !hostParams || (totals[2] && !nvmeShadow)) {
    err = "cannot allocate " +
          std::to_string(totals[0] + totals[1] + totals[2]) +
          " bytes for the plan's parameters and optimizer state";
    return false;
  }
  paramBytes = totals[0];
  hostParamBytes = totals[1];
  nvmeBytes = totals[2];
  paramOffsets = offsets;
  for (size_t i = 0; i < offsets.size(); ++i)
    paramPtr.push_back((location[i] == 0   ? params.get()
                        : location[i] == 1 ? hostParams.get()
                                           : nvmeShadow.get()) +
                       offsets[i]);
  return true;
}

bool Executor::Impl::loadWeights(std::string &err) {
  const plan::Plan &pp = p();
  int rank = options.comm ? options.comm->rank() : 0;
  if (!layoutParameters(rank, err))
    return false;
  if (pp.parameters_size() == 0)
    return true;
  if (pp.weights().shapes_only()) {
    err = "the plan's model is shapes-only: it has no weights to load";
    return false;
  }
  if (pp.weights().path().empty()) {
    err = "the plan has parameters but no weights source";
    return false;
  }
  WeightsSource src;
  src.path = plan->dir + "/" + pp.weights().path();
  uint64_t fileBytes = 0, fileHash = 0;
  if (!scanInitializers(src.path, src.inits, fileBytes, fileHash, err))
    return false;
  if (fileBytes != pp.weights().size() ||
      fileHash != pp.weights().content_hash()) {
    err = "the weights source '" + src.path +
          "' changed since the plan was compiled (size or hash differs); "
          "recompile the plan";
    return false;
  }
  size_t slash = src.path.find_last_of('/');
  src.onnxDir = slash == std::string::npos ? "." : src.path.substr(0, slash);
  for (int i = 0; i < pp.parameters_size(); ++i)
    if (!loadParameter(i, src, rank, err))
      return false;
  return nvme ? pushShadow(err) : true;
}

bool Executor::Impl::loadParameter(int i, const WeightsSource &src, int rank,
                                   std::string &err) {
  const plan::Parameter &param = p().parameters(i);
  // ZeRO shards are over the data-parallel group: its rank.
  int tpSize = std::max<int>(1, static_cast<int>(p().tensor_parallel()));
  int dpRank = rank / tpSize;
  const std::string &path = src.path;
  // Optimizer state starts at zero; a master copy (mixed precision)
  // as its parameter's initializer.
  const std::string &source =
      param.master_of().empty() ? param.name() : param.master_of();
  if (param.state() && param.master_of().empty()) {
    std::memset(paramPtr[i], 0, paramSize[i]);
    return true;
  }
  auto it = src.inits.find(source);
  if (it == src.inits.end()) {
    err = "parameter '" + source + "' is not in '" + path + "'";
    return false;
  }
  const InitializerRef &ref = it->second;
  const onnx::TensorProto &t = ref.header;
  DType dt = toDType(param.dtype());
  // Tensor parallelism: this rank's slice along an axis (a master
  // copy is sliced as its parameter is).
  auto [tpAxis, tpParts, tpBlocks, tpTotal] = tpSplitOf(i);
  std::vector<int64_t> tpWhole =
      param.sharded()
          ? std::vector<int64_t>(param.full_shape().begin(),
                                 param.full_shape().end())
          : std::vector<int64_t>(param.shape().begin(), param.shape().end());
  if (tpParts > 1)
    tpWhole[tpAxis] = tpTotal > 0 ? tpTotal : tpWhole[tpAxis] * tpParts;
  google::protobuf::RepeatedField<int64_t> wholeShape(tpWhole.begin(),
                                                      tpWhole.end());
  const auto &shape =
      param.sharded() && tpParts <= 1 ? param.full_shape() : wholeShape;
  bool dimsMatch = t.dims_size() == shape.size();
  int64_t total = 1;
  for (int d = 0; d < shape.size(); ++d) {
    dimsMatch = dimsMatch && t.dims(d) == shape[d];
    total *= shape[d];
  }
  // Mixed precision stores a float initializer in another float type
  // (16-bit weights, f32 masters): read it in its own, then convert.
  DType fileType = dt;
  bool convert = false;
  if (t.data_type() != onnxType(dt) && isFloat(dt))
    for (DType f : {DType::F32, DType::F16, DType::BF16})
      if (t.data_type() == onnxType(f)) {
        fileType = f;
        convert = true;
      }
  if (t.data_type() != onnxType(fileType) || !dimsMatch) {
    err = "parameter '" + source + "' in '" + path +
          "' differs in type or shape from the plan";
    return false;
  }
  if (tpParts > 1) {
    // Read the whole tensor in the file's type, keep the slice.
    DType ft = convert ? fileType : dt;
    std::vector<unsigned char> whole(
        static_cast<size_t>(std::max<int64_t>(total, 1)) * dtypeSize(ft));
    if (!initializerBytes(ref, path, src.onnxDir, ft, total, 0, total,
                          whole.data(), err))
      return false;
    TpLayout layout(tpWhole, tpAxis, tpParts, tpBlocks);
    std::vector<unsigned char> slice(layout.sliceBytes(dtypeSize(ft)));
    layout.cut(whole.data(), slice.data(), rank % tpParts, dtypeSize(ft));
    int64_t n = static_cast<int64_t>(slice.size() / dtypeSize(ft)), first = 0;
    if (param.sharded()) {
      // A ZeRO shard of the slice: elements [r*S, (r+1)*S), zeros past
      // its end.
      int64_t s = param.shape(0);
      first = std::min<int64_t>(n, s * dpRank);
      std::memset(paramPtr[i], 0, paramSize[i]);
      n = std::min<int64_t>(s, n - first);
    }
    for (int64_t e = 0; e < n; ++e)
      storeD(paramPtr[i], dt, e, loadD(slice.data(), ft, first + e));
    return true;
  }
  // A shard: elements [r*S, (r+1)*S) of the flattened tensor, zeros
  // past its end (padding).
  int64_t first = 0, count = total;
  if (param.sharded()) {
    int64_t s = param.shape(0);
    first = std::min<int64_t>(total, s * dpRank);
    count = std::min<int64_t>(s, total - first);
    std::memset(paramPtr[i], 0, paramSize[i]);
  }
  if (!convert)
    return initializerBytes(ref, path, src.onnxDir, dt, total, first, count,
                            paramPtr[i], err);
  std::vector<unsigned char> tmp(
      static_cast<size_t>(std::max<int64_t>(count, 1)) * dtypeSize(fileType));
  if (!initializerBytes(ref, path, src.onnxDir, fileType, total, first, count,
                        tmp.data(), err))
    return false;
  for (int64_t e = 0; e < count; ++e)
    storeD(paramPtr[i], dt, e, loadD(tmp.data(), fileType, e));
  return true;
}

std::tuple<int, int, int, int64_t> Executor::Impl::tpSplitOf(int i) const {
  const plan::Parameter &param = p().parameters(i);
  const plan::Parameter *of = &param;
  if (!param.master_of().empty() && param.tp_parts() <= 1)
    for (const plan::Parameter &q : p().parameters())
      if (q.name() == param.master_of())
        of = &q;
  if (of->tp_parts() <= 1)
    return {0, 1, 1, 0};
  return {of->tp_axis(), static_cast<int>(of->tp_parts()),
          std::max(1, static_cast<int>(of->tp_blocks())), of->tp_whole()};
}

int Executor::Impl::masterOf(int i) const {
  const std::string &name = p().parameters(i).name();
  for (int j = 0; j < p().parameters_size(); ++j)
    if (p().parameters(j).master_of() == name)
      return j;
  return -1;
}

} // namespace ds::rt

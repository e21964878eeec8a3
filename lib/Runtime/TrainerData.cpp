//===- TrainerData.cpp - batches and token windows for training ----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// --data: each array is one global batch (world x the plan's per-rank
// batch) or k of them stacked along the batch axis (the first dimension,
// or the one the plan records for the input), used in turn; each
// data-parallel rank takes its rows along that axis. --tokens: a stream of token ids
// from which every step samples windows at random (splitmix64 of seed,
// run and row), the inputs at [o, o+T) and the targets at [o+1, o+T+1).
//
//===----------------------------------------------------------------------===//

#include "PlanImpl.h"
#include "TrainerImpl.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace ds::rt {

namespace {

/// Whether `name` is one of the two --token-inputs.
bool isTokenInput(const std::string &tokenInputs, const std::string &name) {
  return tokenInputs.rfind(name + ",", 0) == 0 ||
         (tokenInputs.size() > name.size() &&
          tokenInputs.compare(tokenInputs.size() - name.size() - 1,
                              name.size() + 1, "," + name) == 0);
}

/// The axis of input `name` that holds the batch (0 unless the plan says).
size_t batchAxis(const RunContext &ctx, const std::string &name) {
  auto it = ctx.info.batchAxes.find(name);
  return it == ctx.info.batchAxes.end() ? 0 : static_cast<size_t>(it->second);
}

} // namespace

/// Checks data array `t` against graph input `spec`; counts its batches.
/// The ranks' rows and the stacked batches lie along the input's batch
/// axis (the plan's, 0 unless an LSTM/GRU initial state says 1).
bool checkArray(RunContext &ctx, TrainData &data, const std::string &name,
                const HostTensor &spec, const HostTensor &t,
                const std::string &what) {
  int dpSize = ctx.dpSize;
  size_t b = batchAxis(ctx, name);
  if (b > 0 && b >= spec.shape.size())
    return ctx.fail("the plan's batch axis " + std::to_string(b) +
                    " of input '" + name + "' is outside its shape " +
                    spec.shapeString());
  int64_t unit = spec.shape.empty() ? 0 : spec.shape[b] * dpSize;
  bool whole = t.shape == spec.shape;
  bool stacked = !spec.shape.empty() && t.shape.size() == spec.shape.size() &&
                 unit > 0 && t.shape[b] % unit == 0;
  for (size_t d = 0; stacked && d < spec.shape.size(); ++d)
    stacked = d == b || t.shape[d] == spec.shape[d];
  std::string along = b == 0 ? "the first dimension"
                             : "dimension " + std::to_string(b);
  if (!whole && !stacked)
    return ctx.fail(what + " '" + name + "' has shape " + t.shapeString() +
                    ", the plan's input is " + spec.shapeString() +
                    (dpSize > 1 ? " per rank: give " + std::to_string(dpSize) +
                                      " x that many along " + along
                                : "") +
                    " (or k of them stacked along " + along + ")");
  int64_t k = stacked ? t.shape[b] / unit : 1;
  if (k > 1 && data.batches > 1 && k != data.batches)
    return ctx.fail("data arrays hold different numbers of batches (" +
                    std::to_string(data.batches) + " and " +
                    std::to_string(k) + ")");
  data.batches = std::max(data.batches, k);
  data.samples = (spec.shape.empty() ? 1 : spec.shape[b]) * dpSize;
  if (data.tokensPerSample == 0 && spec.shape.size() >= 2 &&
      (t.dtype == DType::I64 || t.dtype == DType::I32)) {
    data.tokensPerSample = 1;
    for (size_t d = 0; d < spec.shape.size(); ++d)
      if (d != b)
        data.tokensPerSample *= spec.shape[d];
  }
  return true;
}

namespace {

/// The token ids of --tokens: a .npy of integers or raw uint16/uint32.
bool readTokens(RunContext &ctx, std::vector<int64_t> &tokens) {
  const std::string &path = ctx.opts.tokensPath;
  std::string err;
  if (endsWith(path, ".npy")) {
    HostTensor t;
    if (!readNpy(path, t, err))
      return ctx.fail(err);
    if (t.dtype != DType::I64 && t.dtype != DType::I32)
      return ctx.fail("'" + path + "' holds " + dtypeName(t.dtype) +
                      ", token ids must be integers");
    for (int64_t i = 0; i < t.numel(); ++i)
      tokens.push_back(
          t.dtype == DType::I64
              ? reinterpret_cast<const int64_t *>(t.data.data())[i]
              : reinterpret_cast<const int32_t *>(t.data.data())[i]);
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return ctx.fail("cannot open '" + path + "'");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  size_t width = ctx.opts.tokenDtype == "uint8"    ? 1
                 : ctx.opts.tokenDtype == "uint16" ? 2
                                                   : 4;
  if (raw.size() % width)
    return ctx.fail("'" + path + "' is not a whole number of " +
                    ctx.opts.tokenDtype + " token ids");
  for (size_t i = 0; i < raw.size(); i += width) {
    uint32_t v = 0;
    std::memcpy(&v, raw.data() + i, width);
    tokens.push_back(v);
  }
  return true;
}

/// The two --token-inputs must be integer [batch, T] graph inputs (of
/// any stage); their shape is the window.
bool checkTokenInputs(RunContext &ctx, TrainData &data) {
  // With pipeline parallelism the stages split the inputs between them:
  // a name is checked against every stage's.
  std::vector<std::pair<std::string, HostTensor>> tokenSpecs = data.specs;
  for (const auto &[n, spec] : ctx.pipelineInputs)
    tokenSpecs.push_back({n, spec});
  for (const std::string &name : {data.tokIn, data.tokOut}) {
    bool found = false;
    for (const auto &[n, spec] : tokenSpecs)
      if (n == name) {
        found = true;
        if (spec.shape.size() != 2 ||
            (spec.dtype != DType::I64 && spec.dtype != DType::I32))
          return ctx.fail("--token-inputs: input '" + name +
                          "' must be an integer [batch, T] tensor, the plan "
                          "has " +
                          std::string(dtypeName(spec.dtype)) + " " +
                          spec.shapeString());
        data.window = spec.shape;
      }
    if (!found)
      return ctx.fail("--token-inputs names '" + name +
                      "', which is not a graph input (inputs: " + data.names +
                      ")");
  }
  return true;
}

} // namespace

bool loadBatches(RunContext &ctx, TrainData &data) {
  const RunOptions &o = ctx.opts;
  std::string err;
  if (!o.dataPath.empty() && !readNpz(o.dataPath, data.arrays, err))
    return ctx.fail(err);
  for (const auto &[name, spec] : ctx.info.inputs)
    if (name != "ds.step" && name != "ds.loss_scale")
      data.specs.push_back({name, spec});
  for (const auto &[name, spec] : data.specs)
    data.names += (data.names.empty() ? "" : ", ") + name;
  for (const auto &[name, spec] : data.specs) {
    auto it = data.arrays.find(name);
    if (it == data.arrays.end()) {
      bool fromTokens =
          !o.tokensPath.empty() && isTokenInput(o.tokenInputs, name);
      if (!o.dataPath.empty() && !fromTokens)
        return ctx.fail("'" + o.dataPath + "' has no array '" + name +
                        "' (graph inputs: " + data.names + ")");
      continue; // given with --inputs or --tokens
    }
    if (!checkArray(ctx, data, name, spec, it->second))
      return false;
  }
  return true;
}

bool loadTokens(RunContext &ctx, TrainData &data) {
  const RunOptions &o = ctx.opts;
  if (o.tokensPath.empty())
    return true;
  data.tokIn = o.tokenInputs.substr(0, o.tokenInputs.find(','));
  data.tokOut = o.tokenInputs.substr(o.tokenInputs.find(',') + 1);
  if (!checkTokenInputs(ctx, data) || !readTokens(ctx, data.tokens))
    return false;
  const std::vector<int64_t> &tokens = data.tokens;
  if (static_cast<int64_t>(tokens.size()) < data.window[1] + 1)
    return ctx.fail("'" + o.tokensPath + "' holds " +
                    std::to_string(tokens.size()) +
                    " tokens, fewer than a window of " +
                    std::to_string(data.window[1] + 1));
  for (const std::string &name : {data.tokIn, data.tokOut}) {
    auto lim = ctx.info.indexLimits.find(name);
    if (lim == ctx.info.indexLimits.end())
      continue;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= lim->second)
        return ctx.fail("token id " + std::to_string(tokens[i]) +
                        " at position " + std::to_string(i) + " of '" +
                        o.tokensPath + "' is outside the vocabulary of " +
                        std::to_string(lim->second) + " (input '" + name +
                        "')");
  }
  data.samples = data.window[0] * ctx.dpSize;
  data.tokensPerSample = data.window[1];
  return true;
}

/// With pipeline parallelism an input goes to the chunk that has it.
static bool hasInput(const RunContext &ctx, Executor *ex,
                     const std::string &name) {
  if (ctx.stages == 1)
    return true;
  std::vector<std::string> names = ex->inputNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// nn.EmbeddingBag offsets (the plan's bag_indices): a global batch's
/// offsets index its flat indices, which the data-parallel ranks split
/// evenly, N each. Rank q's B bags (rows [g + qB, g + (q+1)B) of `t`) must
/// start at index qN and end by (q+1)N; this rank's are re-based to its own
/// indices. Every rank checks every rank's bags, so that all fail alike
/// (none waits in a collective) when the batch's bags do not split there,
/// and for include_last_offset (its B*W+1 offsets do not split into W
/// equal parts).
static bool rebaseBagOffsets(RunContext &ctx, const std::string &name,
                             const HostTensor &t, int64_t g,
                             HostTensor &batch) {
  // The plan's record of the input (any chunk's, with pipeline stages).
  const plan::Value *rec = nullptr;
  for (const auto &p : ctx.chunkPlans.empty()
                           ? std::vector<std::shared_ptr<const Plan>>{ctx.plan}
                           : ctx.chunkPlans)
    for (const plan::Value &v : p->proto.inputs())
      if (v.name() == name && v.bag_indices() > 0)
        rec = &v;
  if (!rec)
    return true;
  int64_t bags = batch.numel(), n = rec->bag_indices();
  std::string head = "input '" + name + "' holds nn.EmbeddingBag offsets";
  if (rec->bag_last_offset())
    return ctx.fail(head + " with include_last_offset, which ds-run cannot "
                           "split over data-parallel ranks: export with "
                           "include_last_offset=False, or run on one rank");
  auto at = [&](const HostTensor &h, int64_t i) -> int64_t {
    return h.dtype == DType::I32
               ? reinterpret_cast<const int32_t *>(h.data.data())[i]
               : reinterpret_cast<const int64_t *>(h.data.data())[i];
  };
  for (int q = 0; q < ctx.dpSize; ++q)
    for (int64_t i = 0; i < bags; ++i) {
      int64_t v = at(t, g + q * bags + i) - q * n;
      if ((i == 0 && v != 0) || v < 0 || v > n)
        return ctx.fail(
            head + ", which " + std::to_string(ctx.dpSize) +
            " data-parallel ranks split as " + std::to_string(bags) +
            " bags of " + std::to_string(n) + " indices each: rank " +
            std::to_string(q) + "'s bag " + std::to_string(i) +
            " starts at index " + std::to_string(v + q * n) +
            " of the global batch, outside its indices [" +
            std::to_string(q * n) + ", " + std::to_string((q + 1) * n) +
            "]" + (i == 0 ? " or not at their start" : "") +
            ": give batches whose bags split evenly over the ranks");
    }
  for (int64_t i = 0; i < bags; ++i) {
    int64_t v = at(batch, i) - ctx.dpRank * n;
    if (batch.dtype == DType::I32)
      reinterpret_cast<int32_t *>(batch.data.data())[i] =
          static_cast<int32_t>(v);
    else
      reinterpret_cast<int64_t *>(batch.data.data())[i] = v;
  }
  return true;
}

bool feedBatches(RunContext &ctx, const TrainData &data, Executor *ex,
                 long long m) {
  std::string err;
  for (const auto &[name, spec] : data.specs) {
    auto it = data.arrays.find(name);
    if (it == data.arrays.end())
      continue;
    const HostTensor &t = it->second;
    HostTensor batch = t;
    if (t.shape != spec.shape || ctx.sc->size() > 1) {
      // Global batch (m-1) mod k, this rank's rows of it, along the
      // input's batch axis: `outer` blocks of rows of `rowBytes` each.
      size_t b = batchAxis(ctx, name);
      int64_t unit = spec.shape[b] * ctx.dpSize;
      int64_t k = t.shape[b] % unit == 0 ? t.shape[b] / unit : 1;
      int64_t outer = 1;
      for (size_t d = 0; d < b; ++d)
        outer *= t.shape[d];
      size_t rowBytes = t.data.size() / (outer * t.shape[b]);
      size_t first = t.shape[b] % unit == 0
                         ? (((m - 1) % k) * unit + ctx.dpRank * spec.shape[b])
                         : 0;
      size_t take = spec.shape[b] * rowBytes;
      batch.shape = spec.shape;
      batch.data.resize(outer * take);
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(batch.data.data() + o * take,
                    t.data.data() + (o * t.shape[b] + first) * rowBytes, take);
      bool split = t.shape[b] % unit == 0 && ctx.dpSize > 1;
      if (split && !rebaseBagOffsets(ctx, name, t, ((m - 1) % k) * unit,
                                     batch))
        return false;
    }
    if (hasInput(ctx, ex, name) && !ex->setInput(name, std::move(batch), err))
      return ctx.fail(err);
  }
  return true;
}

bool feedTokens(RunContext &ctx, const TrainData &data, Executor *ex,
                long long m) {
  // splitmix64 of (seed, step, row): the same windows for the same seed,
  // whatever the thread count.
  const std::vector<int64_t> &window = data.window;
  const std::vector<int64_t> &tokens = data.tokens;
  HostTensor in, out;
  in.dtype = out.dtype = DType::I64;
  in.shape = out.shape = window;
  in.data.resize(window[0] * window[1] * 8);
  out.data.resize(in.data.size());
  uint64_t range = tokens.size() - window[1];
  for (int64_t r = 0; r < window[0]; ++r) {
    uint64_t z = static_cast<uint64_t>(ctx.opts.seed) * 0x9e3779b97f4a7c15ULL +
                 static_cast<uint64_t>(m) * 0xbf58476d1ce4e5b9ULL +
                 static_cast<uint64_t>(r + ctx.dpRank * window[0]) *
                     0x94d049bb133111ebULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    uint64_t o = (z ^ (z >> 31)) % range;
    for (int64_t j = 0; j < window[1]; ++j) {
      int64_t a = tokens[o + j], b = tokens[o + j + 1];
      std::memcpy(in.data.data() + (r * window[1] + j) * 8, &a, 8);
      std::memcpy(out.data.data() + (r * window[1] + j) * 8, &b, 8);
    }
  }
  std::string err;
  if ((hasInput(ctx, ex, data.tokIn) &&
       !ex->setInput(data.tokIn, std::move(in), err)) ||
      (hasInput(ctx, ex, data.tokOut) &&
       !ex->setInput(data.tokOut, std::move(out), err)))
    return ctx.fail(err);
  return true;
}

} // namespace ds::rt

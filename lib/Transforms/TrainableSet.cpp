//===- TrainableSet.cpp - which parameters training updates ---------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//
//
// torch.onnx.export writes parameters and buffers alike as initializers and
// drops requires_grad and padding_idx; ds.export (python/ds) records them in
// the model's metadata_props, which the importer keeps as the module
// attribute `ds.export_record`. This pass decides the trainable set from
// that record and the --freeze/--trainable overrides (trainable parameters
// keep `ds.trainable`, frozen ones get `ds.frozen`, the rest are buffers),
// and says so in one notice when an export carries no record. An
// embedding's recorded padding_idx marks the table argument and each
// lookup (`ds.gather` on axis 0) of it with `ds.padding_idx`; the lookup's
// VJP then gives that row no gradient from the lookup, as torch does.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"

namespace mlir::ds {
#define GEN_PASS_DEF_TRAINABLESETPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kFrozen = "ds.frozen";
constexpr llvm::StringLiteral kPaddingIdx = "ds.padding_idx";

/// What ds.export recorded about the initializers.
/// (Its mode is checked by the importer, which --allow-eval-export
/// overrides.)
struct ExportRecord {
  llvm::StringSet<> trainable, frozen, buffers;
  llvm::StringMap<int64_t> paddingIdx;
};

/// Parses one JSON list of names from the record, or fails naming the key.
LogicalResult readNames(ModuleOp module, DictionaryAttr record,
                        StringRef key, llvm::StringSet<> &out) {
  auto text = record.getAs<StringAttr>(key);
  if (!text)
    return success(); // an older record: the key is simply absent
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(text.getValue());
  const llvm::json::Array *list = v ? v->getAsArray() : nullptr;
  if (!list) {
    if (!v)
      llvm::consumeError(v.takeError());
    return module.emitError("the export's metadata '")
           << key << "' is not a JSON list of names";
  }
  for (const llvm::json::Value &name : *list) {
    std::optional<StringRef> s = name.getAsString();
    if (!s)
      return module.emitError("the export's metadata '")
             << key << "' holds a value that is not a name";
    out.insert(*s);
  }
  return success();
}

FailureOr<std::optional<ExportRecord>> readRecord(ModuleOp module) {
  auto record = module->getAttrOfType<DictionaryAttr>(attrs::kExportRecord);
  if (!record || !record.get("ds.trainable"))
    return std::optional<ExportRecord>();
  ExportRecord r;
  if (failed(readNames(module, record, "ds.trainable", r.trainable)) ||
      failed(readNames(module, record, "ds.frozen", r.frozen)) ||
      failed(readNames(module, record, "ds.buffers", r.buffers)))
    return failure();
  if (auto text = record.getAs<StringAttr>("ds.padding_idx")) {
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(text.getValue());
    const llvm::json::Object *rows = v ? v->getAsObject() : nullptr;
    if (!rows) {
      if (!v)
        llvm::consumeError(v.takeError());
      return module.emitError(
          "the export's metadata 'ds.padding_idx' is not a JSON object");
    }
    for (const auto &[name, row] : *rows) {
      std::optional<int64_t> i = row.getAsInteger();
      if (!i)
        return module.emitError("the export's metadata 'ds.padding_idx' of '")
               << name.str() << "' is not an integer";
      r.paddingIdx[name.str()] = *i;
    }
  }
  return std::optional<ExportRecord>(std::move(r));
}

/// A user's pattern, checked once.
FailureOr<std::optional<llvm::Regex>> compile(ModuleOp module, StringRef flag,
                                              StringRef pattern) {
  if (pattern.empty())
    return std::optional<llvm::Regex>();
  llvm::Regex re(pattern);
  std::string why;
  if (!re.isValid(why))
    return module.emitError("--") << flag << "='" << pattern
                                  << "' is not a valid regular expression: "
                                  << why;
  return std::optional<llvm::Regex>(std::move(re));
}

struct TrainableSetPass : impl::TrainableSetPassBase<TrainableSetPass> {
  using TrainableSetPassBase::TrainableSetPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    FailureOr<std::optional<ExportRecord>> record = readRecord(module);
    auto freezeRe = compile(module, "freeze", freeze);
    auto trainRe = compile(module, "trainable", trainable);
    if (!func || failed(record) || failed(freezeRe) || failed(trainRe))
      return signalPassFailure();
    int64_t trained = 0;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam))
        trained += decide(func, i, name.getValue(), *record, *freezeRe,
                          *trainRe);
    bool overridden = !freeze.empty() || !trainable.empty();
    if (!*record && !overridden)
      module.emitWarning("no trainable record in this export (it was not "
                         "written by ds.export): training all ")
          << trained
          << " float initializers that reach the loss; choose with "
             "--freeze=REGEX or --trainable=REGEX, or export with ds.export";
  }

  /// Records table `arg`'s padding row on the argument and on each lookup
  /// of it (a gather on axis 0 of the table itself); a table tied to an
  /// output layer keeps that layer's gradient at the row.
  static void markPadding(func::FuncOp func, unsigned arg, int64_t row) {
    auto idx = IntegerAttr::get(IntegerType::get(func.getContext(), 64), row);
    func.setArgAttr(arg, kPaddingIdx, idx);
    Value table = func.getArgument(arg);
    for (Operation *user : table.getUsers())
      if (auto g = dyn_cast<GatherOp>(user);
          g && g.getData() == table && g.getAxis() == 0)
        g->setAttr(kPaddingIdx, idx);
  }

  /// Sets parameter `arg`'s kind and whether it is trained; returns 1 when
  /// it is.
  int64_t decide(func::FuncOp func, unsigned arg, StringRef name,
                 const std::optional<ExportRecord> &record,
                 const std::optional<llvm::Regex> &freezeRe,
                 const std::optional<llvm::Regex> &trainRe) {
    MLIRContext *ctx = func.getContext();
    // The importer marks the float parameters that reach the loss.
    bool reaches = static_cast<bool>(func.getArgAttr(arg, attrs::kTrainable));
    StringRef kind = reaches ? "trainable" : "buffer";
    if (record) {
      kind = record->trainable.contains(name) ? "trainable"
             : record->frozen.contains(name)  ? "frozen"
                                              : "buffer";
      if (auto it = record->paddingIdx.find(name);
          it != record->paddingIdx.end())
        markPadding(func, arg, it->second);
    }
    // --trainable names the whole trainable set; --freeze takes from it.
    if (trainRe)
      kind = trainRe->match(name) ? "trainable"
             : kind == "trainable" ? "frozen"
                                   : kind;
    if (freezeRe && freezeRe->match(name))
      kind = "frozen";
    if (kind == "trainable" && !reaches) {
      // No float path to the loss: it gets no gradient (as in torch).
      if (trainRe && trainRe->match(name))
        func.emitWarning("--trainable matches '")
            << name << "', which does not reach the loss: it is not trained";
      kind = record ? "frozen" : "buffer";
    }
    // Trainable parameters keep ds.trainable, frozen ones are marked
    // ds.frozen, and a parameter with neither is a buffer.
    if (kind != "trainable")
      func.removeArgAttr(arg, attrs::kTrainable);
    if (kind == "frozen")
      func.setArgAttr(arg, kFrozen, UnitAttr::get(ctx));
    return kind == "trainable";
  }
};

} // namespace
} // namespace mlir::ds

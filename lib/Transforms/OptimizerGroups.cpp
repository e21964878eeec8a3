//===- OptimizerGroups.cpp - per-parameter hyper-parameters ---------------===//
//
// Part of the ds project.
//
// Parameter groups as torch optimizers have them (the HF Trainer's group of
// biases and LayerNorm weights without weight decay): ds.initialize records
// each trained parameter's own learning rate and weight decay in the
// export's metadata `ds.param_groups`; the optimizer pass gives each
// parameter's update op those values instead of the pass options'.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"

#include "llvm/Support/JSON.h"

namespace mlir::ds::optimizer {

FailureOr<llvm::StringMap<Hyperparameters>>
readParameterGroups(ModuleOp module, const Hyperparameters &base) {
  llvm::StringMap<Hyperparameters> groups;
  auto record = module->getAttrOfType<DictionaryAttr>(attrs::kExportRecord);
  auto text = record ? record.getAs<StringAttr>("ds.param_groups") : nullptr;
  if (!text)
    return groups;
  auto bad = [&](const Twine &what) {
    return module.emitError("the export's metadata 'ds.param_groups' ")
           << what;
  };
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(text.getValue());
  const llvm::json::Object *byName = v ? v->getAsObject() : nullptr;
  if (!byName) {
    if (!v)
      llvm::consumeError(v.takeError());
    return bad("is not a JSON object (parameter name -> settings)");
  }
  for (const auto &[name, settings] : *byName) {
    const llvm::json::Object *fields = settings.getAsObject();
    if (!fields)
      return bad("of '" + name.str() + "' is not a JSON object");
    Hyperparameters hp = base;
    for (const auto &[key, value] : *fields) {
      std::optional<double> x = value.getAsNumber();
      if (!x || *x < 0)
        return bad("of '" + name.str() + "': '" + key.str() +
                   "' is not a non-negative number");
      if (key == "lr")
        hp.lr = *x;
      else if (key == "weight_decay")
        hp.weightDecay = *x;
      else
        return bad("of '" + name.str() + "' has the unknown setting '" +
                   key.str() + "' (lr and weight_decay are supported)");
    }
    groups[name.str()] = hp;
  }
  return groups;
}

} // namespace mlir::ds::optimizer

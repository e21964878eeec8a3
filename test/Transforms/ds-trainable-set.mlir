// RUN: ds-opt %s -split-input-file --ds-trainable-set -verify-diagnostics | FileCheck %s
// RUN: not ds-opt %s -split-input-file --ds-trainable-set='freeze=^w$' 2>/dev/null | FileCheck %s --check-prefix=FREEZE
// RUN: not ds-opt %s -split-input-file --ds-trainable-set='trainable=^(f|b)$' 2>/dev/null | FileCheck %s --check-prefix=ONLY
// RUN: not ds-opt %s -split-input-file --ds-trainable-set='trainable=^(f|b)$' 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// RUN: not ds-opt %s -split-input-file --ds-trainable-set='freeze=^w$' 2>&1 >/dev/null | FileCheck %s --check-prefix=QUIET
// WARN-NOT: warning: no trainable record
// WARN: warning: --trainable matches 'b', which does not reach the loss: it is not trained
// WARN-NOT: warning: no trainable record
// QUIET-NOT: warning: no trainable record

// A record from ds.export: w trainable, f frozen, pos a buffer, emb with a
// padding row. The importer had marked all but pos reaching the loss.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %{{.*}}: tensor<4xf32> {ds.param = "w", ds.trainable}
// CHECK-SAME: %{{.*}}: tensor<4xf32> {ds.frozen, ds.param = "f"}
// CHECK-SAME: %{{.*}}: tensor<4xf32> {ds.param = "pos"}
// CHECK-SAME: %{{.*}}: tensor<3x4xf32> {ds.padding_idx = 0 : i64, ds.param = "emb", ds.trainable}
// FREEZE-LABEL: func.func @forward
// FREEZE-SAME: {ds.frozen, ds.param = "w"}
// FREEZE-SAME: {ds.frozen, ds.param = "f"}
// ONLY-LABEL: func.func @forward
// ONLY-SAME: {ds.frozen, ds.param = "w"}
// ONLY-SAME: {ds.param = "f", ds.trainable}
// ONLY-SAME: {ds.param = "pos"}
// ONLY-SAME: {ds.frozen, ds.padding_idx = 0 : i64, ds.param = "emb"}
module attributes {ds.export_record = {"ds.mode" = "training", "ds.trainable" = "[\"w\", \"emb\"]", "ds.frozen" = "[\"f\"]", "ds.buffers" = "[\"pos\"]", "ds.padding_idx" = "{\"emb\": 0}"}} {
  func.func @forward(%w: tensor<4xf32> {ds.param = "w", ds.trainable}, %f: tensor<4xf32> {ds.param = "f", ds.trainable}, %pos: tensor<4xf32> {ds.param = "pos"}, %emb: tensor<3x4xf32> {ds.param = "emb", ds.trainable}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
}

// -----

// A plain export: everything that reaches the loss is trained, with one
// notice (none when --freeze or --trainable says otherwise).
// CHECK-LABEL: func.func @forward
// CHECK-SAME: {ds.param = "a", ds.trainable}
// CHECK-SAME: {ds.param = "b"}
// FREEZE-LABEL: func.func @forward
// ONLY-LABEL: func.func @forward
// ONLY-SAME: {ds.frozen, ds.param = "a"}
// ONLY-SAME: {ds.param = "b"}
// expected-warning @+1 {{no trainable record in this export (it was not written by ds.export): training all 1 float initializers that reach the loss; choose with --freeze=REGEX or --trainable=REGEX, or export with ds.export}}
module {
  func.func @forward(%a: tensor<4xf32> {ds.param = "a", ds.trainable}, %b: tensor<4xf32> {ds.param = "b"}) -> tensor<4xf32> {
    return %a : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{the export's metadata 'ds.frozen' is not a JSON list of names}}
module attributes {ds.export_record = {"ds.mode" = "training", "ds.trainable" = "[]", "ds.frozen" = "{"}} {
  func.func @forward(%a: tensor<4xf32> {ds.param = "a", ds.trainable}) -> tensor<4xf32> {
    return %a : tensor<4xf32>
  }
}

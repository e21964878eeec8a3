// An embedding's recorded padding_idx: the trainable-set pass marks the
// table and its lookups (a gather on axis 0 of the table itself), and the
// lookup's VJP zeroes the gradient of the positions that read the padding
// row, so the lookup adds nothing to that row (torch's padding_idx); other
// uses of the table (a tied output layer) are not masked.
// RUN: ds-opt %s --ds-trainable-set --ds-autodiff | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-SAME: {ds.padding_idx = 0 : i64, ds.param = "emb", ds.trainable}
// CHECK: %[[G:.*]] = ds.gather %{{.*}}, %[[IDS:[^ ]*]] {axis = 0 : i64, ds.padding_idx = 0 : i64}
// CHECK: %[[PAD:.*]] = ds.constant dense<0> : tensor<i64>
// CHECK-NEXT: %[[HIT:.*]] = ds.equal %[[IDS]], %[[PAD]] : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
// CHECK-NEXT: %[[ROW:.*]] = ds.reshape %[[HIT]] : tensor<2x3xi1> -> tensor<2x3x1xi1>
// CHECK-NEXT: %[[ZERO:.*]] = ds.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[MASKED:.*]] = ds.where %[[ROW]], %[[ZERO]], %{{.*}} : (tensor<2x3x1xi1>, tensor<f32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: ds.gather_grad %[[MASKED]], %[[IDS]]
module attributes {ds.export_record = {"ds.mode" = "training", "ds.trainable" = "[\"emb\"]", "ds.frozen" = "[]", "ds.buffers" = "[]", "ds.padding_idx" = "{\"emb\": 0}"}} {
  func.func @forward(%ids: tensor<2x3xi64> {ds.input = "ids"}, %emb: tensor<5x4xf32> {ds.param = "emb", ds.trainable}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
    %h = ds.gather %emb, %ids {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
    %l = ds.reduce_mean %h {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

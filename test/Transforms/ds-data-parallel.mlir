// Data parallelism: every gradient and the loss become the mean over ranks.
// RUN: ds-opt %s --ds-autodiff '--ds-data-parallel=world-size=2' -split-input-file -verify-diagnostics | FileCheck %s
// RUN: ds-opt %s --ds-autodiff '--ds-data-parallel=world-size=1' -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=ONE

// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {ds.world_size = 2 : i64}
// CHECK: %[[L:.*]] = ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<f32>
// CHECK: %[[G:.*]] = ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<4x3xf32>
// CHECK: return %[[L]], %[[G]]
// ONE-LABEL: func.func @forward
// ONE-SAME: attributes {ds.world_size = 1 : i64}
// ONE-NOT: ds.all_reduce
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// ZeRO-3 partitions frozen parameters and float buffers no result of the
// step writes like trainable weights (docs/training.md): `f` (frozen) and
// `pos` (a buffer) become shards, `stat` (a buffer the step writes, as
// BatchNorm's running statistics) and `ids` (an integer buffer) stay whole.
// `f` is gathered again for the backward pass, whose input gradient reads
// it; `w` and `pos` only for the forward (no gradient reads them). Only
// `w` gets a reduce-scatter and optimizer state. (--canonicalize drops the
// gradients autodiff makes for the input and the frozen weight, unused.)
// RUN: ds-opt %s --ds-autodiff --canonicalize '--ds-zero=world-size=2 stage=3 reduce-bucket-size=1 prefetch-bucket-size=1' --ds-optimizer | FileCheck %s
// RUN: ds-opt %s --ds-autodiff --canonicalize '--ds-zero=world-size=2 stage=3 param-persistence-threshold=10 prefetch-bucket-size=1' | FileCheck %s --check-prefix=KEEP
// RUN: ds-opt %s --ds-autodiff --canonicalize '--ds-zero=world-size=2 stage=2' | FileCheck %s --check-prefix=Z2

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg1: tensor<6xf32> {ds.full_shape = array<i64: 4, 3>, ds.param = "w", ds.trainable}
// CHECK-SAME: %arg2: tensor<5xf32> {ds.frozen, ds.full_shape = array<i64: 3, 3>, ds.param = "f"}
// CHECK-SAME: %arg3: tensor<2xf32> {ds.full_shape = array<i64: 3>, ds.param = "pos"}
// CHECK-SAME: %arg4: tensor<3xf32> {ds.param = "stat"}
// CHECK-SAME: %arg5: tensor<3xi64> {ds.param = "ids"}
// CHECK: ds.all_gather %arg1
// CHECK: ds.all_gather %arg2
// CHECK: ds.all_gather %arg3
// CHECK: ds.loss_grad
// CHECK-NOT: ds.all_gather %arg1
// CHECK-NOT: ds.all_gather %arg3
// CHECK: %[[F:.*]] = ds.all_gather %arg2 {group = 0 : i64} : tensor<5xf32> -> tensor<10xf32>
// CHECK-NOT: ds.all_gather %arg1
// CHECK-NOT: ds.all_gather %arg3
// CHECK: ds.reduce_scatter %{{.*}} : tensor<12xf32> -> tensor<6xf32>
// CHECK-NOT: ds.reduce_scatter
// CHECK: ds.adam %arg1,
// CHECK-NOT: ds.adam
// CHECK: return

// The persistence threshold (10) applies as to trainable weights: the 9-element
// `f` and the 3-element `pos` stay whole, the 12-element `w` does not.
// KEEP-LABEL: func.func @forward
// KEEP-SAME: %arg1: tensor<6xf32> {ds.full_shape = array<i64: 4, 3>, ds.param = "w", ds.trainable}
// KEEP-SAME: %arg2: tensor<3x3xf32> {ds.frozen, ds.param = "f"}
// KEEP-SAME: %arg3: tensor<3xf32> {ds.param = "pos"}

// Stages 0-2 keep every parameter whole.
// Z2-LABEL: func.func @forward
// Z2-SAME: %arg2: tensor<3x3xf32> {ds.frozen, ds.param = "f"}
// Z2-SAME: %arg3: tensor<3xf32> {ds.param = "pos"}
// Z2-NOT: ds.all_gather
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %f: tensor<3x3xf32> {ds.param = "f", ds.frozen},
                   %pos: tensor<3xf32> {ds.param = "pos"},
                   %stat: tensor<3xf32> {ds.param = "stat"},
                   %ids: tensor<3xi64> {ds.param = "ids"},
                   %y: tensor<2xi64> {ds.input = "y"})
    -> (tensor<f32> {ds.output = "loss", ds.loss}, tensor<3xf32> {ds.update = "stat"}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h2 = ds.matmul %h, %f : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %h3 = ds.add %h2, %pos : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h3, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  %s = ds.add %stat, %stat : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %l, %s : tensor<f32>, tensor<3xf32>
}

// The vocabulary split of the tensor-parallel pass, on a tied embedding and
// output layer (GPT's wte): the table by rows, each lookup a vocab_gather
// summed over the group, the output layer's input marked with f, the logits
// by columns through the reshape to the loss, which becomes
// vocab_cross_entropy; the returned logits (partial on each rank) stop
// being a result. A position table gathered by constants is left whole.
// Autodiff gives the loss gradient without communication and the table's
// gradient as the two slices' sum. A vocabulary T does not divide (6 over
// 4 ranks) is padded: 2 rows per rank, the true size in the split
// attribute and on the ops (the loss leaves the padding out).
// RUN: ds-opt %s '--ds-tensor-parallel=size=2' | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s '--ds-tensor-parallel=size=2' --ds-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: ds-opt %s '--ds-tensor-parallel=size=4' | FileCheck %s --check-prefix=FOUR
// The same split by the passes one after the other; the vocabulary pass
// alone leaves the MLP whole.
// RUN: ds-opt %s '--ds-tensor-parallel=size=2 vocab-parallel=false' --ds-vocab-parallel=size=2 | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s '--ds-tensor-parallel=size=4 vocab-parallel=false' --ds-vocab-parallel=size=4 | FileCheck %s --check-prefix=FOUR
// RUN: ds-opt %s --ds-vocab-parallel=size=2 | FileCheck %s --check-prefix=ALONE

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg1: tensor<3x4xf32> {ds.param = "wte", ds.tp_split = array<i64: 0, 2>, ds.trainable}
// CHECK-SAME: %arg2: tensor<2x4xf32> {ds.param = "wpe", ds.trainable}
// CHECK-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"})
// CHECK-SAME: attributes {ds.tensor_parallel = 2 : i64, ds.vocab_parallel}
// CHECK: %[[E:.*]] = ds.vocab_gather %arg1, %arg0 {group = 1 : i64} : (tensor<3x4xf32>, tensor<1x2xi64>) -> tensor<1x2x4xf32>
// CHECK: %[[S:.*]] = ds.tp_all_reduce %[[E]] {group = 1 : i64} : tensor<1x2x4xf32>
// CHECK: ds.gather %arg2
// CHECK: ds.add %[[S]]
// CHECK: %[[T:.*]] = ds.transpose %arg1 {perm = array<i64: 1, 0>} : tensor<3x4xf32> -> tensor<4x3xf32>
// CHECK: %[[F:.*]] = ds.tp_identity %{{.*}} {group = 1 : i64} : tensor<1x2x4xf32>
// CHECK: %[[L:.*]] = ds.matmul %[[F]], %[[T]] : (tensor<1x2x4xf32>, tensor<4x3xf32>) -> tensor<1x2x3xf32>
// CHECK: %[[R:.*]] = ds.reshape %[[L]] : tensor<1x2x3xf32> -> tensor<2x3xf32>
// CHECK: %{{.*}}, %{{.*}} = ds.vocab_cross_entropy %[[R]], %{{.*}} {group = 1 : i64, ignore_index = -100 : i64, reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2xf32>)
// CHECK-NOT: softmax_cross_entropy_loss
// CHECK: return %{{.*}} : tensor<f32>

// GRAD: %[[LOSS:.*]], %[[LSE:.*]] = ds.vocab_cross_entropy
// GRAD: ds.vocab_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[LSE]] {group = 1 : i64, ignore_index = -100 : i64, reduction = "mean"} : (tensor<f32>, tensor<2x3xf32>, tensor<2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
// GRAD: ds.tp_all_reduce %{{.*}} {group = 1 : i64} : tensor<1x2x4xf32>
// GRAD: ds.vocab_gather_grad %{{.*}}, %arg0 {group = 1 : i64} : (tensor<1x2x4xf32>, tensor<1x2xi64>) -> tensor<3x4xf32>

// FOUR: tensor<2x4xf32> {ds.param = "wte", ds.tp_split = array<i64: 0, 4, 1, 6>, ds.trainable}
// FOUR: ds.vocab_gather %arg1, %arg0 {group = 1 : i64, vocab = 6 : i64}
// FOUR: ds.vocab_cross_entropy {{.*}} {group = 1 : i64, ignore_index = -100 : i64, reduction = "mean", vocab = 6 : i64} : (tensor<2x2xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2xf32>)

// ALONE-LABEL: func.func @forward
// ALONE-SAME: %arg1: tensor<3x4xf32> {ds.param = "wte", ds.tp_split = array<i64: 0, 2>, ds.trainable}
// ALONE-SAME: %arg3: tensor<12x4xf32> {ds.param = "w1", ds.trainable}
// ALONE-SAME: attributes {ds.tensor_parallel = 2 : i64, ds.vocab_parallel}
// ALONE: ds.vocab_gather %arg1, %arg0
// ALONE: ds.matmul %{{.*}}, %{{.*}} : (tensor<1x2x4xf32>, tensor<4x12xf32>) -> tensor<1x2x12xf32>
// ALONE: ds.vocab_cross_entropy
func.func @forward(%idx: tensor<1x2xi64> {ds.input = "idx"}, %wte: tensor<6x4xf32> {ds.param = "wte", ds.trainable},
                   %wpe: tensor<2x4xf32> {ds.param = "wpe", ds.trainable}, %w1: tensor<12x4xf32> {ds.param = "w1", ds.trainable},
                   %w2: tensor<4x12xf32> {ds.param = "w2", ds.trainable}, %y: tensor<1x2xi64> {ds.input = "y"})
    -> (tensor<1x2x6xf32> {ds.output = "logits"}, tensor<f32> {ds.output = "loss", ds.loss}) {
  %pos = ds.constant dense<[0, 1]> : tensor<2xi64>
  %e = ds.gather %wte, %idx {axis = 0 : i64} : (tensor<6x4xf32>, tensor<1x2xi64>) -> tensor<1x2x4xf32>
  %p = ds.gather %wpe, %pos {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %x = ds.add %e, %p : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x4xf32>
  %t1 = ds.transpose %w1 {perm = array<i64: 1, 0>} : tensor<12x4xf32> -> tensor<4x12xf32>
  %m1 = ds.matmul %x, %t1 : (tensor<1x2x4xf32>, tensor<4x12xf32>) -> tensor<1x2x12xf32>
  %r = ds.relu %m1 : tensor<1x2x12xf32>
  %t2 = ds.transpose %w2 {perm = array<i64: 1, 0>} : tensor<4x12xf32> -> tensor<12x4xf32>
  %m2 = ds.matmul %r, %t2 : (tensor<1x2x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32>
  %h = ds.add %x, %m2 : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  %tw = ds.transpose %wte {perm = array<i64: 1, 0>} : tensor<6x4xf32> -> tensor<4x6xf32>
  %logits = ds.matmul %h, %tw : (tensor<1x2x4xf32>, tensor<4x6xf32>) -> tensor<1x2x6xf32>
  %s = ds.reshape %logits : tensor<1x2x6xf32> -> tensor<2x6xf32>
  %yy = ds.reshape %y : tensor<1x2xi64> -> tensor<2xi64>
  %l = ds.softmax_cross_entropy_loss %s, %yy {ignore_index = -100 : i64, reduction = "mean"} : (tensor<2x6xf32>, tensor<2xi64>) -> tensor<f32>
  return %logits, %l : tensor<1x2x6xf32>, tensor<f32>
}

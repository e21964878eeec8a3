// Sequence parallelism in the tensor-parallel pass, on a tied embedding,
// an MLP block and the loss: the lookup's group sum becomes a
// reduce-scatter of the token dimension (dimension 1 of [1, 2, 4]), the
// position table is sliced to the rank's tokens and its gradient summed,
// the residual add runs on the rank's rows, the MLP's input f becomes an
// all-gather and its g a reduce-scatter, and the output layer's input is
// gathered whole. Autodiff: the all-gather's gradient is a reduce-scatter
// and the reduce-scatter's an all-gather. With 4 ranks no token dimension
// divides: one error naming the numbers.
// RUN: ds-opt %s '--ds-tensor-parallel=size=2 sequence-parallel=true' | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s '--ds-tensor-parallel=size=2 sequence-parallel=true' --ds-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not ds-opt %s '--ds-tensor-parallel=size=4 sequence-parallel=true' 2>&1 | FileCheck %s --check-prefix=FOUR
// The same by the passes one after the other; alone, on a graph without
// group sums, the sequence pass has nothing to split.
// RUN: ds-opt %s '--ds-tensor-parallel=size=2 vocab-parallel=false' --ds-vocab-parallel=size=2 --ds-sequence-parallel=size=2 | FileCheck %s --check-prefix=CHECK
// RUN: not ds-opt %s '--ds-tensor-parallel=size=4 vocab-parallel=false' --ds-vocab-parallel=size=4 --ds-sequence-parallel=size=4 2>&1 | FileCheck %s --check-prefix=FOUR
// RUN: not ds-opt %s --ds-sequence-parallel=size=2 2>&1 | FileCheck %s --check-prefix=NONE

// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {ds.sequence_parallel, ds.tensor_parallel = 2 : i64, ds.vocab_parallel}
// CHECK: %[[E:.*]] = ds.vocab_gather %arg1, %arg0
// CHECK: %[[RS:.*]] = ds.sp_reduce_scatter %[[E]] {axis = 1 : i64, group = 1 : i64} : tensor<1x2x4xf32> -> tensor<1x1x4xf32>
// CHECK: %[[P:.*]] = ds.gather %arg2
// CHECK: %[[PS:.*]] = ds.sp_slice %[[P]] {axis = 0 : i64, group = 1 : i64} : tensor<2x4xf32> -> tensor<1x4xf32>
// CHECK: %[[X:.*]] = ds.add %[[RS]], %[[PS]] : (tensor<1x1x4xf32>, tensor<1x4xf32>) -> tensor<1x1x4xf32>
// CHECK: %[[G:.*]] = ds.sp_all_gather %[[X]] {axis = 1 : i64, group = 1 : i64, partial_grad = true} : tensor<1x1x4xf32> -> tensor<1x2x4xf32>
// CHECK: ds.matmul %[[G]]
// CHECK: %[[M2:.*]] = ds.sp_reduce_scatter %{{.*}} {axis = 1 : i64, group = 1 : i64} : tensor<1x2x4xf32> -> tensor<1x1x4xf32>
// CHECK: %[[H:.*]] = ds.add %[[X]], %[[M2]] : (tensor<1x1x4xf32>, tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
// CHECK: ds.sp_all_gather %[[H]] {axis = 1 : i64, group = 1 : i64, partial_grad = true} : tensor<1x1x4xf32> -> tensor<1x2x4xf32>
// CHECK: ds.vocab_cross_entropy

// GRAD: ds.vocab_cross_entropy_grad
// GRAD: ds.sp_reduce_scatter %{{.*}} {axis = 1 : i64, group = 1 : i64} : tensor<1x2x4xf32> -> tensor<1x1x4xf32>
// GRAD: ds.sp_all_gather %{{.*}} {axis = 1 : i64, group = 1 : i64, partial_grad = false} : tensor<1x1x4xf32> -> tensor<1x2x4xf32>
// GRAD: ds.sp_all_gather %{{.*}} {axis = 0 : i64, group = 1 : i64, partial_grad = false} : tensor<1x4xf32> -> tensor<2x4xf32>

// FOUR: error: --sequence-parallel: --tensor-parallel=4 divides the token dimension of no block output (2 tokens); give a batch or sequence length it divides
// NONE: error: --sequence-parallel: --tensor-parallel=2 divides the token dimension of no block output
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

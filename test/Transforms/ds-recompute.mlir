// Recompute: cut points, segment costs, clones in the backward pass.
// RUN: ds-opt %s --ds-autodiff '--ds-recompute=mode=every-layer' | FileCheck %s
// RUN: ds-opt %s --ds-autodiff '--ds-recompute=mode=none' | FileCheck %s --check-prefix=NONE
// RUN: ds-opt %s --ds-autodiff '--ds-recompute=mode=full' | FileCheck %s --check-prefix=FULL
// RUN: ds-opt %s --ds-autodiff '--ds-recompute=mode=full' --cse | FileCheck %s --check-prefix=FULL
// RUN: ds-opt %s --ds-autodiff '--ds-recompute=mode=budget budget=140' | FileCheck %s --check-prefix=BUDGET
// RUN: not ds-opt %s --ds-autodiff '--ds-recompute=mode=budget budget=10' 2>&1 | FileCheck %s --check-prefix=LOW
// RUN: not ds-opt %s --ds-autodiff '--ds-recompute=mode=sometimes' 2>&1 | FileCheck %s --check-prefix=BAD

// A first layer, then two residual blocks h + W2 tanh(W1 h): the residual
// stream is the only tensor crossing each block boundary, so each block is
// a segment whose saved value is its tanh (read by tanh's and the second
// matmul's backward), 2x4 f32 = 32 bytes, recomputed by 72 FLOPs. Always
// kept: the 3 cut values (96 bytes) and the loss (4).
// NONE: ds.recompute = {budget = 0 : i64, chosen = array<i64: 164, 0>, every_layer = array<i64: 132, 144>, fixed = 100 : i64, full = array<i64: 132, 144>, layer_period = 1 : i64, layers = 2 : i64, mode = "none", none = array<i64: 164, 0>, planning_us = {{[0-9]+}} : i64, seg_chosen = array<i64: 0, 0, 0, 0>, seg_flops = array<i64: 0, 72, 72, 0>, seg_input = array<i64: 0, 32, 32, 32>, seg_recomputable = array<i64: 0, 1, 1, 0>, seg_saved = array<i64: 0, 32, 32, 0>
// NONE-NOT: {ds.recompute}

// Full: each block's matmul and tanh are cloned just before the backward
// pass reads the tanh (the second block first), and CSE does not merge the
// clones back into the forward ops.
// FULL: ds.softmax_cross_entropy_loss
// FULL: ds.loss_grad
// FULL: %[[A:.*]] = ds.matmul %{{.*}}, %arg4 {ds.recompute}
// FULL: %[[T:.*]] = ds.tanh %[[A]] {ds.recompute}
// FULL: ds.mul %[[T]], %[[T]]
// FULL: %[[A0:.*]] = ds.matmul %{{.*}}, %arg2 {ds.recompute}
// FULL: %[[T0:.*]] = ds.tanh %[[A0]] {ds.recompute}
// FULL: ds.mul %[[T0]], %[[T0]]

// Every layer: the two blocks repeat (period 1), each is a layer and both
// are recomputed from their inputs.
// CHECK: layer_period = 1 : i64, layers = 2 : i64, mode = "every-layer"
// CHECK-SAME: seg_chosen = array<i64: 0, 1, 1, 0>
// CHECK: ds.loss_grad
// CHECK-COUNT-2: ds.tanh {{.*}} {ds.recompute}

// A budget of 140 bytes allows one block's tanh: the first block is the
// one to recompute (the second's backward runs first, while the first's
// saved value would still be live).
// BUDGET: seg_chosen = array<i64: 0, 1, 0, 0>
// LOW: error: recompute budget of 10 bytes of activations is below the minimum of 132 bytes (every segment recomputed)
// BAD: error: unknown recompute mode 'sometimes' (choose none, full, every-layer or budget)
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w0: tensor<4x4xf32> {ds.param = "w0", ds.trainable}, %w1: tensor<4x4xf32> {ds.param = "w1", ds.trainable},
                   %w2: tensor<4x4xf32> {ds.param = "w2", ds.trainable}, %w3: tensor<4x4xf32> {ds.param = "w3", ds.trainable},
                   %w4: tensor<4x4xf32> {ds.param = "w4", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h0 = ds.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a0 = ds.matmul %h0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t0 = ds.tanh %a0 : tensor<2x4xf32>
  %b0 = ds.matmul %t0, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %h1 = ds.add %h0, %b0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %a1 = ds.matmul %h1, %w3 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t1 = ds.tanh %a1 : tensor<2x4xf32>
  %b1 = ds.matmul %t1, %w4 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %h2 = ds.add %h1, %b1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = ds.softmax_cross_entropy_loss %h2, %y {reduction = "mean"} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

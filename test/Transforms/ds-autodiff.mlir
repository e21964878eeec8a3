// Reverse mode through VJPOpInterface.
// RUN: ds-opt %s --ds-autodiff -split-input-file -verify-diagnostics | FileCheck %s

// A parameter used twice sums its gradients; a broadcast bias gets its
// gradient reduced to its shape; an unreached parameter gets zeros; a
// non-trainable one none.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x4xf32> {ds.grad = "w", ds.output = "grad:w"}, tensor<4xf32> {ds.grad = "b", ds.output = "grad:b"}, tensor<3xf32> {ds.grad = "unused", ds.output = "grad:unused"})
// CHECK: ds.constant dense<1.000000e+00> : tensor<f32>
// The product with the frozen parameter's value (dead, removed by
// canonicalization) comes first, then the bias gradient summed over rows.
// CHECK: ds.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = true} : tensor<2x4xf32> -> tensor<1x4xf32>
// CHECK: ds.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = true} : tensor<2x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT: %[[GB:.*]] = ds.reshape %{{.*}} : tensor<1x4xf32> -> tensor<4xf32>
// CHECK: %[[GW:.*]] = ds.add %{{.*}}, %{{.*}} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: %[[Z:.*]] = ds.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK-NEXT: return %{{.*}}, %[[GW]], %[[GB]], %[[Z]]
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x4xf32> {ds.param = "w", ds.trainable},
                   %b: tensor<4xf32> {ds.param = "b", ds.trainable}, %u: tensor<3xf32> {ds.param = "unused", ds.trainable},
                   %frozen: tensor<4xf32> {ds.param = "frozen"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %hb = ds.add %h, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %hf = ds.mul %hb, %frozen : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %h2 = ds.matmul %hf, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %l = ds.reduce_mean %h2 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{autodiff needs a loss: no result is marked ds.loss}}
func.func @forward(%x: tensor<4xf32> {ds.param = "x", ds.trainable}) -> (tensor<4xf32> {ds.output = "y"}) {
  %y = ds.exp %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @forward(%s: tensor<f32> {ds.param = "s", ds.trainable}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %d = ds.constant dense<1.0> : tensor<f32>
  // expected-error @+1 {{'ds.range' op has no gradient rule (VJP) on the path to the loss}}
  %r = ds.range %s, %s, %d : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<0xf32>
  %l = ds.reduce_sum %r {axes = array<i64: 0>, keepdims = false} : tensor<0xf32> -> tensor<f32>
  return %l : tensor<f32>
}

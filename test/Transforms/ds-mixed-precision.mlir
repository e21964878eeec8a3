// Mixed precision: 16-bit compute, f32 master weights, f32 islands.
// RUN: ds-opt %s --ds-mixed-precision | FileCheck %s
// RUN: ds-opt %s '--ds-mixed-precision=precision=fp16' | FileCheck %s --check-prefix=F16
// RUN: ds-opt %s '--ds-mixed-precision=precision=fp32' | FileCheck %s --check-prefix=F32
// RUN: ds-opt %s --ds-mixed-precision --ds-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not ds-opt %s '--ds-mixed-precision=precision=fp8' 2>&1 | FileCheck %s --check-prefix=BAD

// The master weight stays an f32 argument, cast once; the matmul and the
// add compute in bf16; LayerNorm and the loss (islands) in f32; the
// result keeps its type.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<4x3xf32> {ds.param = "w", ds.trainable}
// CHECK-SAME: attributes {ds.precision = "bf16"}
// CHECK-DAG: %[[W16:.*]] = ds.cast %[[W]] : tensor<4x3xf32> -> tensor<4x3xbf16>
// CHECK-DAG: %[[X16:.*]] = ds.cast %arg0 : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[H:.*]] = ds.matmul %[[X16]], %[[W16]] : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[A:.*]] = ds.add %[[H]], %{{.*}} : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[A32:.*]] = ds.cast %[[A]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK: ds.layer_norm %[[A32]], {{.*}} -> tensor<2x3xf32>
// CHECK: ds.softmax_cross_entropy_loss {{.*}} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
// CHECK: return {{.*}} : tensor<f32>
// F16: ds.matmul {{.*}} -> tensor<2x3xf16>
// F32-NOT: ds.cast
// F32-NOT: bf16

// Autodiff through the casts: the master weight's gradient is f32.
// GRAD: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x3xf32> {ds.grad = "w", ds.output = "grad:w"}
// GRAD: ds.cast %{{.*}} : tensor<4x3xbf16> -> tensor<4x3xf32>
// BAD: error: unknown precision 'fp8' (choose fp32, fp16 or bf16)
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %b = ds.constant dense<0.5> : tensor<3xf32>
  %g = ds.constant dense<1.0> : tensor<3xf32>
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %a = ds.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %n = ds.layer_norm %a, %g, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %n, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

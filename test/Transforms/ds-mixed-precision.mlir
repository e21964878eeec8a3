// Mixed precision: 16-bit compute, f32 master weights, f32 islands.
// RUN: ds-opt %s --ds-mixed-precision | FileCheck %s
// RUN: ds-opt %s '--ds-mixed-precision=precision=fp16' | FileCheck %s --check-prefix=F16
// RUN: ds-opt %s '--ds-mixed-precision=precision=fp32' | FileCheck %s --check-prefix=F32
// RUN: ds-opt %s --ds-mixed-precision --ds-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: ds-opt %s --ds-mixed-precision --ds-autodiff --ds-optimizer | FileCheck %s --check-prefix=OPT
// RUN: ds-opt %s '--ds-mixed-precision=precision=fp16' --ds-autodiff --ds-optimizer | FileCheck %s --check-prefix=SCALE
// RUN: not ds-opt %s '--ds-mixed-precision=precision=fp8' 2>&1 | FileCheck %s --check-prefix=BAD

// The trainable weight becomes a bf16 argument; the input and the bias
// constant are cast down once; the matmul and the add compute in bf16;
// LayerNorm and the loss (islands) in f32; the result keeps its type.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<4x3xbf16> {ds.param = "w", ds.trainable}
// CHECK-SAME: attributes {ds.precision = "bf16"}
// CHECK-NOT: ds.cast %[[W]]
// CHECK-DAG: %[[X16:.*]] = ds.cast %arg0 : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[H:.*]] = ds.matmul %[[X16]], %[[W]] : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[A:.*]] = ds.add %[[H]], %{{.*}} : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[A32:.*]] = ds.cast %[[A]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK: ds.layer_norm %[[A32]], {{.*}} -> tensor<2x3xf32>
// CHECK: ds.softmax_cross_entropy_loss {{.*}} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
// CHECK: return {{.*}} : tensor<f32>
// F16: tensor<4x3xf16> {ds.param = "w", ds.trainable}
// F16: ds.matmul {{.*}} -> tensor<2x3xf16>
// F32-NOT: ds.cast
// F32-NOT: bf16

// Autodiff through the casts: the weight's gradient is bf16.
// GRAD: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x3xbf16> {ds.grad = "w", ds.output = "grad:w"}

// The optimizer updates an f32 master copy (state that starts as the
// weight's initializer) from the gradient cast up, and writes the weight
// back as the master's cast down.
// OPT: %[[W:arg1]]: tensor<4x3xbf16> {ds.param = "w", ds.trainable}
// OPT-SAME: %[[M:arg[0-9]+]]: tensor<4x3xf32> {ds.master_of = "w", ds.state = "w.master"}
// OPT-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x3xbf16> {ds.output = "update:w", ds.update = "w"}, tensor<4x3xf32> {ds.output = "update:w.master", ds.update = "w.master"}
// OPT: %[[G:.*]] = ds.matmul {{.*}} -> tensor<4x3xbf16>
// OPT: %[[G32:.*]] = ds.cast %[[G]] : tensor<4x3xbf16> -> tensor<4x3xf32>
// OPT: %[[NEW:new_param]], {{.*}} = ds.adam %[[M]], %[[G32]]
// OPT: %[[W16:.*]] = ds.cast %[[NEW]] : tensor<4x3xf32> -> tensor<4x3xbf16>
// OPT: return %loss, %[[W16]], %[[NEW]]

// fp16: the overflow check reads the 16-bit gradient; it is unscaled in
// f32, just before its update.
// SCALE: %[[G:.*]] = ds.matmul {{.*}} -> tensor<4x3xf16>
// SCALE: ds.check_overflow %[[G]] : (tensor<4x3xf16>) -> tensor<f32>
// SCALE: %[[INV:.*]] = ds.reciprocal
// SCALE: %[[G32:.*]] = ds.cast %[[G]] : tensor<4x3xf16> -> tensor<4x3xf32>
// SCALE: %[[U:.*]] = ds.mul %[[G32]], %[[INV]]
// SCALE: ds.adam %{{.*}}, %[[U]]
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

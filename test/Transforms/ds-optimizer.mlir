// The optimizer pass: after autodiff, each gradient result becomes an
// update of its parameter; state and the step counter become arguments.
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adamw lr=0.01 weight-decay=0.1' -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=sgd momentum=0.9 nesterov=true grad-clip=1.0' -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=SGD
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adam grad-accum=2 grad-clip=1.0' -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=ACCUMCLIP

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %{{.*}}: tensor<4x3xf32> {ds.param = "w", ds.trainable}
// CHECK-SAME: %[[STEP:[a-z0-9_]+]]: tensor<i64> {ds.step}
// CHECK-SAME: %[[M:[a-z0-9_]+]]: tensor<4x3xf32> {ds.state = "w.exp_avg"}
// CHECK-SAME: %[[V:[a-z0-9_]+]]: tensor<4x3xf32> {ds.state = "w.exp_avg_sq"}
// CHECK-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x3xf32> {ds.output = "update:w", ds.update = "w"}, tensor<4x3xf32> {ds.output = "update:w.exp_avg", ds.update = "w.exp_avg"}, tensor<4x3xf32> {ds.output = "update:w.exp_avg_sq", ds.update = "w.exp_avg_sq"})
// CHECK-SAME: attributes {ds.optimizer = "adamw"}
// CHECK: %[[P:[a-z0-9_]+]], %[[NM:[a-z0-9_]+]], %[[NV:[a-z0-9_]+]] = ds.adam %arg1, %{{.*}}, %[[M]], %[[V]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = true, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK: return %{{.*}}, %[[P]], %[[NM]], %[[NV]]

// SGD-LABEL: func.func @forward
// SGD-SAME: %[[STEP:[a-z0-9_]+]]: tensor<i64> {ds.step}
// SGD-SAME: %[[BUF:[a-z0-9_]+]]: tensor<4x3xf32> {ds.state = "w.momentum_buffer"}
// The global norm: sum of squares, sqrt, min(1, c / (norm + 1e-6)).
// SGD: ds.reduce_sum
// SGD: ds.sqrt
// SGD: ds.min
// SGD: %[[CLIPPED:.*]] = ds.mul
// SGD: ds.sgd %arg1, %[[CLIPPED]], %[[BUF]], %[[STEP]] {dampening = 0.000000e+00 : f64, lr = 1.000000e-03 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 0.000000e+00 : f64}
// Clipping with accumulation: the norm of accumulator + gradient, over K,
// is the update's clip coefficient (the kernel scales the mean by it).
// ACCUMCLIP-LABEL: func.func @forward
// ACCUMCLIP-SAME: %[[STEP:[a-z0-9_]+]]: tensor<i64> {ds.step}
// ACCUMCLIP-SAME: %[[ACC:[a-z0-9_]+]]: tensor<4x3xf32> {ds.state = "w.grad_accum"}
// ACCUMCLIP: %[[SUM:.*]] = ds.add %[[ACC]], %[[G:[0-9]+]]
// ACCUMCLIP: ds.mul %[[SUM]], %[[SUM]]
// ACCUMCLIP: ds.reduce_sum
// ACCUMCLIP: ds.sqrt
// ACCUMCLIP: %[[COEF:.*]] = ds.min
// ACCUMCLIP: ds.adam %arg1, %[[G]], %{{.*}}, %{{.*}}, %[[STEP]], %[[ACC]] clip %[[COEF]] {accum_steps = 2 : i64
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

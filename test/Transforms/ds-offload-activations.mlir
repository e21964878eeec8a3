// The activation offload pass: each forward tensor the backward pass reads
// goes to the host after its last forward reader and comes back one
// fetching reader ahead of its first backward reader; the backward pass
// reads the copy. Arguments (the data x) and the function's results stay.
// RUN: ds-opt %s --ds-autodiff '--ds-offload-activations=to=host min-bytes=0' | FileCheck %s
// RUN: ds-opt %s --ds-autodiff '--ds-offload-activations=to=host min-bytes=200' | FileCheck %s --check-prefix=MIN
// RUN: ds-opt %s --ds-autodiff '--ds-offload-activations=to=none' | FileCheck %s --check-prefix=NONE
// RUN: not ds-opt %s --ds-autodiff '--ds-offload-activations=to=disk' 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not ds-opt %s '--ds-offload-activations=to=host' 2>&1 | FileCheck %s --check-prefix=NOBWD

// CHECK-LABEL: func.func @forward
// CHECK-SAME: ds.offload_activations = {bytes = 560 : i64, min_bytes = 0 : i64, tensors = 3 : i64}
// CHECK: %[[H:.*]] = ds.matmul %arg0, %arg1
// CHECK-NEXT: %[[R:.*]] = ds.relu %[[H]]
// CHECK-NEXT: %[[HH:.*]] = ds.transfer %[[H]] {to = "host"} : tensor<4x16xf32>
// CHECK-NEXT: %[[O:.*]] = ds.matmul %[[R]], %arg2
// CHECK-NEXT: %[[RH:.*]] = ds.transfer %[[R]] {to = "host"} : tensor<4x16xf32>
// CHECK-NEXT: %[[L:.*]] = ds.softmax_cross_entropy_loss %[[O]]
// CHECK-NEXT: %[[OH:.*]] = ds.transfer %[[O]] {to = "host"} : tensor<4x3xf32>
// The first backward reader's fetch just ahead of it; the next one's
// ahead of the reader before it.
// CHECK: %[[RD:.*]] = ds.transfer %[[RH]] {to = "device"} : tensor<4x16xf32>
// CHECK-NEXT: %[[OD:.*]] = ds.transfer %[[OH]] {to = "device"} : tensor<4x3xf32>
// CHECK-NEXT: %[[G:.*]] = ds.loss_grad %{{.*}}, %[[OD]], %arg3
// CHECK: %[[HD:.*]] = ds.transfer %[[HH]] {to = "device"} : tensor<4x16xf32>
// CHECK-NEXT: ds.transpose %[[RD]]
// CHECK: ds.greater %[[HD]]
// CHECK-NOT: ds.transfer
// CHECK: return %[[L]]

// Only tensors of at least min-bytes: the 4x3 logits (48 bytes) stay.
// MIN-LABEL: func.func @forward
// MIN-SAME: ds.offload_activations = {bytes = 512 : i64, min_bytes = 200 : i64, tensors = 2 : i64}
// MIN-NOT: ds.transfer %{{.*}} : tensor<4x3xf32>

// NONE-LABEL: func.func @forward
// NONE-NOT: ds.transfer

// ERR: error: offload activations to 'disk': choose none or host (cpu)
// NOBWD: error: activation offload needs a training step (a loss and its backward pass)
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"}, %w1: tensor<8x16xf32> {ds.param = "w1", ds.trainable},
                   %w2: tensor<16x3xf32> {ds.param = "w2", ds.trainable},
                   %y: tensor<4xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r = ds.relu %h : tensor<4x16xf32>
  %o = ds.matmul %r, %w2 : (tensor<4x16xf32>, tensor<16x3xf32>) -> tensor<4x3xf32>
  %l = ds.softmax_cross_entropy_loss %o, %y {reduction = "mean"} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// The offload pass: optimizer state to the host (or NVMe), the optimizer
// on the host, explicit transfers where values cross.
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adam master-weights=true' '--ds-offload=optimizer=host' | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adam master-weights=true' '--ds-offload=optimizer=nvme' | FileCheck %s --check-prefix=NVME
// RUN: not ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adam' '--ds-offload=optimizer=disk' 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adam' '--ds-offload=param=host' 2>&1 | FileCheck %s --check-prefix=ZERO3

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[STEP:[a-z0-9_]+]]: tensor<i64> {ds.space = "host", ds.step}
// CHECK-SAME: %[[MASTER:[a-z0-9_]+]]: tensor<4x3xf32> {ds.master_of = "w", ds.space = "host", ds.state = "w.master"}
// CHECK-SAME: %[[M:[a-z0-9_]+]]: tensor<4x3xf32> {ds.space = "host", ds.state = "w.exp_avg"}
// CHECK-SAME: %[[V:[a-z0-9_]+]]: tensor<4x3xf32> {ds.space = "host", ds.state = "w.exp_avg_sq"}
// CHECK-SAME: attributes {ds.offload = {optimizer = "host", param = "none"}
// The weight gradient crosses as soon as it is made.
// CHECK: %[[G:.*]] = ds.matmul %{{.*}} : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT: %[[GH:.*]] = ds.transfer %[[G]] {to = "host"} : tensor<4x3xf32>
// CHECK-NEXT: %[[P:[a-z0-9_]+]], %[[NM:[a-z0-9_]+]], %[[NV:[a-z0-9_]+]] = ds.adam %[[MASTER]], %[[GH]], %[[M]], %[[V]], %[[STEP]] {{{.*}}ds.on_host
// The new weight goes back to the device; the master stays.
// CHECK-NEXT: %[[PD:.*]] = ds.transfer %[[P]] {to = "device"} : tensor<4x3xf32>
// CHECK-NEXT: return %{{.*}}, %[[PD]], %[[P]], %[[NM]], %[[NV]]

// NVMe: each state is read into host memory before the update and written
// back right after it.
// NVME-LABEL: func.func @forward
// NVME-SAME: ds.space = "nvme", ds.state = "w.exp_avg"
// NVME: %[[GH:.*]] = ds.transfer %{{.*}} {to = "host"}
// NVME: %[[RM:.*]] = ds.transfer %arg4 {to = "host"}
// NVME: %[[P:[a-z0-9_]+]], %[[NM:[a-z0-9_]+]], %[[NV:[a-z0-9_]+]] = ds.adam %[[RM]], %[[GH]]
// NVME: %[[WV:.*]] = ds.transfer %[[NV]] {to = "nvme"}
// NVME: %[[WM:.*]] = ds.transfer %[[NM]] {to = "nvme"}
// NVME: %[[WP:.*]] = ds.transfer %[[P]] {to = "nvme"}
// NVME: %[[PD:.*]] = ds.transfer %[[P]] {to = "device"}
// NVME: return %{{.*}}, %[[PD]], %[[WP]], %[[WM]], %[[WV]]

// ERR: error: offload to 'disk': choose none, host (cpu) or nvme
// ZERO3: error: --offload-param needs --zero=3 (it offloads the ZeRO-3 parameter shards), got --zero=0
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

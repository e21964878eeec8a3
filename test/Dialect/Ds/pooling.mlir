// ds.max_pool, ds.avg_pool and their gradients: the round trip and the
// verifier's output size rule (Support/Pooling.h).
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @pools
func.func @pools(%x: tensor<1x2x9x9xf32>, %g: tensor<1x2x4x4xf32>, %h: tensor<1x2x5x5xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x9x9xf32>, tensor<1x2x5x5xf32>, tensor<1x2x9x9xf32>) {
  // CHECK: ds.max_pool %{{.*}} {ceil_mode = true, dilations = array<i64: 2, 2>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x2x9x9xf32> -> tensor<1x2x4x4xf32>
  %m = ds.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 2>, ceil_mode = true} : tensor<1x2x9x9xf32> -> tensor<1x2x4x4xf32>
  // CHECK: ds.max_pool_grad %{{.*}}, %{{.*}} {{.*}} : tensor<1x2x9x9xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x9x9xf32>
  %dm = ds.max_pool_grad %x, %g {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 2>, ceil_mode = true} : tensor<1x2x9x9xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x9x9xf32>
  // CHECK: ds.avg_pool %{{.*}} {ceil_mode = true, count_include_pad = true, {{.*}}} : tensor<1x2x9x9xf32> -> tensor<1x2x5x5xf32>
  %a = ds.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = true, ceil_mode = true} : tensor<1x2x9x9xf32> -> tensor<1x2x5x5xf32>
  // CHECK: ds.avg_pool_grad %{{.*}} {{.*}} : tensor<1x2x5x5xf32> -> tensor<1x2x9x9xf32>
  %da = ds.avg_pool_grad %h {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = true, ceil_mode = true} : tensor<1x2x5x5xf32> -> tensor<1x2x9x9xf32>
  return %m, %dm, %a, %da : tensor<1x2x4x4xf32>, tensor<1x2x9x9xf32>, tensor<1x2x5x5xf32>, tensor<1x2x9x9xf32>
}


// Round trip of every ds op: print, parse the printed form again, and
// check both agree with what was written.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @constants
func.func @constants(%x: tensor<2x3xf32>) -> (tensor<2xi64>, tensor<2x3xf32>, tensor<4xi64>, tensor<2x3xf32>) {
  // CHECK: ds.constant dense<[2, 3]> : tensor<2xi64>
  %c = ds.constant dense<[2, 3]> : tensor<2xi64>
  // CHECK: ds.shape %{{.*}} {end = 2 : i64, start = 0 : i64} : tensor<2x3xf32> -> tensor<2xi64>
  %s = ds.shape %x {start = 0 : i64, end = 2 : i64} : tensor<2x3xf32> -> tensor<2xi64>
  // CHECK: ds.constant_of_shape %{{.*}} {value = 1.000000e+00 : f32} : tensor<2xi64> -> tensor<2x3xf32>
  %f = ds.constant_of_shape %s {value = 1.0 : f32} : tensor<2xi64> -> tensor<2x3xf32>
  %a = ds.constant dense<0> : tensor<i64>
  %b = ds.constant dense<4> : tensor<i64>
  %d = ds.constant dense<1> : tensor<i64>
  // CHECK: ds.range %{{.*}}, %{{.*}}, %{{.*}} : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4xi64>
  %r = ds.range %a, %b, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4xi64>
  return %s, %f, %r, %x : tensor<2xi64>, tensor<2x3xf32>, tensor<4xi64>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x1xi64>, %j: tensor<3xi64>, %p: tensor<2x3xi1>) -> tensor<2x3xi1> {
  // CHECK: ds.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = ds.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.sub
  %1 = ds.sub %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.mul
  %2 = ds.mul %1, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.div
  %3 = ds.div %2, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.pow
  %4 = ds.pow %3, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.max
  %5 = ds.max %4, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.min
  %6 = ds.min %5, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.equal %{{.*}}, %{{.*}} : (tensor<2x1xi64>, tensor<3xi64>) -> tensor<2x3xi1>
  %7 = ds.equal %i, %j : (tensor<2x1xi64>, tensor<3xi64>) -> tensor<2x3xi1>
  // CHECK: ds.less
  %8 = ds.less %i, %j : (tensor<2x1xi64>, tensor<3xi64>) -> tensor<2x3xi1>
  // CHECK: ds.less_or_equal
  %9 = ds.less_or_equal %i, %j : (tensor<2x1xi64>, tensor<3xi64>) -> tensor<2x3xi1>
  // CHECK: ds.greater
  %10 = ds.greater %6, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: ds.greater_or_equal
  %11 = ds.greater_or_equal %i, %j : (tensor<2x1xi64>, tensor<3xi64>) -> tensor<2x3xi1>
  // CHECK: ds.and
  %12 = ds.and %7, %8 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: ds.or
  %13 = ds.or %12, %9 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: ds.xor
  %14 = ds.xor %13, %10 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %15 = ds.and %14, %11 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %16 = ds.or %15, %p : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  return %16 : tensor<2x3xi1>
}

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4xf32>, %i: tensor<4xi64>, %p: tensor<4xi1>) -> (tensor<4xf32>, tensor<4xi64>, tensor<4xi1>) {
  // CHECK: ds.neg %{{.*}} : tensor<4xf32>
  %0 = ds.neg %x : tensor<4xf32>
  // CHECK: ds.abs
  %1 = ds.abs %0 : tensor<4xf32>
  // CHECK: ds.exp
  %2 = ds.exp %1 : tensor<4xf32>
  // CHECK: ds.log
  %3 = ds.log %2 : tensor<4xf32>
  // CHECK: ds.sqrt
  %4 = ds.sqrt %3 : tensor<4xf32>
  // CHECK: ds.reciprocal
  %5 = ds.reciprocal %4 : tensor<4xf32>
  // CHECK: ds.erf
  %6 = ds.erf %5 : tensor<4xf32>
  // CHECK: ds.tanh
  %7 = ds.tanh %6 : tensor<4xf32>
  // CHECK: ds.relu
  %8 = ds.relu %7 : tensor<4xf32>
  // CHECK: ds.sigmoid
  %9 = ds.sigmoid %8 : tensor<4xf32>
  // CHECK: ds.neg %{{.*}} : tensor<4xi64>
  %10 = ds.neg %i : tensor<4xi64>
  // CHECK: ds.not %{{.*}} : tensor<4xi1>
  %11 = ds.not %p : tensor<4xi1>
  return %9, %10, %11 : tensor<4xf32>, tensor<4xi64>, tensor<4xi1>
}

// CHECK-LABEL: func.func @cast_where
func.func @cast_where(%c: tensor<2x1xi1>, %x: tensor<3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3xbf16>, tensor<3xi32>) {
  // CHECK: ds.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x1xi1>, tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = ds.where %c, %x, %y : (tensor<2x1xi1>, tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: ds.cast %{{.*}} : tensor<3xf32> -> tensor<3xbf16>
  %1 = ds.cast %x : tensor<3xf32> -> tensor<3xbf16>
  // CHECK: ds.cast %{{.*}} : tensor<3xf32> -> tensor<3xi32>
  %2 = ds.cast %x : tensor<3xf32> -> tensor<3xi32>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<3xbf16>, tensor<3xi32>
}

// CHECK-LABEL: func.func @linear_algebra
func.func @linear_algebra(%a: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %v: tensor<8xf32>, %g: tensor<4x8xf32>, %h: tensor<16x8xf32>, %bias: tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  // CHECK: ds.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %0 = ds.matmul %a, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: ds.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4xf32>
  %1 = ds.matmul %a, %v : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4xf32>
  // CHECK: ds.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f32, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = ds.gemm %g, %h, %bias {alpha = 0.5 : f32, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: ds.gemm %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %3 = ds.gemm %g, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %0, %1, %2, %3 : tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// CHECK-LABEL: func.func @normalization
func.func @normalization(%x: tensor<2x3x4xf16>, %s: tensor<4xf16>, %b: tensor<4xf16>) -> (tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>) {
  // CHECK: ds.softmax %{{.*}} {axis = 2 : i64} : tensor<2x3x4xf16>
  %0 = ds.softmax %x {axis = 2 : i64} : tensor<2x3x4xf16>
  // CHECK: ds.log_softmax %{{.*}} {axis = 1 : i64} : tensor<2x3x4xf16>
  %1 = ds.log_softmax %x {axis = 1 : i64} : tensor<2x3x4xf16>
  // CHECK: ds.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
  %2 = ds.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf16>, tensor<4xf16>, tensor<4xf16>) -> tensor<2x3x4xf16>
  // CHECK: ds.layer_norm %{{.*}}, %{{.*}} {axis = 2 : i64
  %3 = ds.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf16>, tensor<4xf16>) -> tensor<2x3x4xf16>
  return %0, %1, %2, %3 : tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%e: tensor<10x4xbf16>, %ids: tensor<2x3xi64>, %x: tensor<2x3x4xf32>, %y: tensor<1x3x1xf32>) -> (tensor<2x3x4xbf16>, tensor<6x4xf32>, tensor<2x3x4xf32>, tensor<4x2x3xf32>, tensor<4x3x4xf32>, tensor<2x1x4xf32>, tensor<2x2x4xf32>, tensor<1x3x2xf32>, tensor<2x3x4xf32>) {
  // CHECK: ds.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<10x4xbf16>, tensor<2x3xi64>) -> tensor<2x3x4xbf16>
  %0 = ds.gather %e, %ids {axis = 0 : i64} : (tensor<10x4xbf16>, tensor<2x3xi64>) -> tensor<2x3x4xbf16>
  // CHECK: ds.reshape %{{.*}} : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = ds.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  // CHECK: ds.expand %{{.*}} : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
  %2 = ds.expand %y : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
  // CHECK: ds.transpose %{{.*}} {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %3 = ds.transpose %x {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  // CHECK: ds.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<4x3x4xf32>
  %4 = ds.concat %x, %x {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<4x3x4xf32>
  // CHECK: ds.split %{{.*}} {axis = 1 : i64} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>, tensor<2x2x4xf32>
  %5:2 = ds.split %x {axis = 1 : i64} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>, tensor<2x2x4xf32>
  // CHECK: ds.slice %{{.*}} {starts = array<i64: 1, 0, 3>, steps = array<i64: 1, 1, -2>} : tensor<2x3x4xf32> -> tensor<1x3x2xf32>
  %6 = ds.slice %x {starts = array<i64: 1, 0, 3>, steps = array<i64: 1, 1, -2>} : tensor<2x3x4xf32> -> tensor<1x3x2xf32>
  // CHECK: ds.trilu %{{.*}} {k = -1 : i64, upper = true} : tensor<2x3x4xf32>
  %7 = ds.trilu %x {upper = true, k = -1 : i64} : tensor<2x3x4xf32>
  return %0, %1, %2, %3, %4, %5#0, %5#1, %6, %7 : tensor<2x3x4xbf16>, tensor<6x4xf32>, tensor<2x3x4xf32>, tensor<4x2x3xf32>, tensor<4x3x4xf32>, tensor<2x1x4xf32>, tensor<2x2x4xf32>, tensor<1x3x2xf32>, tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<2x3x4xf32>, %i: tensor<5xi32>) -> (tensor<2x4xf32>, tensor<1x1x4xf32>, tensor<2x3x1xf32>, tensor<i32>) {
  // CHECK: ds.reduce_sum %{{.*}} {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x4xf32>
  %0 = ds.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x4xf32>
  // CHECK: ds.reduce_mean %{{.*}} {axes = array<i64: 0, 1>, keepdims = true}
  %1 = ds.reduce_mean %x {axes = array<i64: 0, 1>, keepdims = true} : tensor<2x3x4xf32> -> tensor<1x1x4xf32>
  // CHECK: ds.reduce_max %{{.*}} {axes = array<i64: 2>, keepdims = true}
  %2 = ds.reduce_max %x {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  // CHECK: ds.reduce_sum %{{.*}} : tensor<5xi32> -> tensor<i32>
  %3 = ds.reduce_sum %i {axes = array<i64: 0>, keepdims = false} : tensor<5xi32> -> tensor<i32>
  return %0, %1, %2, %3 : tensor<2x4xf32>, tensor<1x1x4xf32>, tensor<2x3x1xf32>, tensor<i32>
}

// CHECK-LABEL: func.func @training
func.func @training(%x: tensor<4x8xf32>, %scores: tensor<4x5x3xf32>, %labels: tensor<4x3xi64>, %w: tensor<5xf32>, %logp: tensor<4x5xf32>, %t: tensor<4xi32>) -> (tensor<4x8xf32>, tensor<4x8xi1>, tensor<f32>, tensor<4x3xf32>, tensor<4x5x3xf32>, tensor<f32>) {
  // CHECK: %{{.*}}, %{{.*}} = ds.dropout %{{.*}} {ratio = 1.000000e-01 : f64, seed = 7 : i64, training = true} : tensor<4x8xf32> -> tensor<4x8xf32>, tensor<4x8xi1>
  %y, %mask = ds.dropout %x {ratio = 0.1 : f64, training = true, seed = 7 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>, tensor<4x8xi1>
  // CHECK: ds.softmax_cross_entropy_loss %{{.*}}, %{{.*}} {ignore_index = -100 : i64, reduction = "mean"} : (tensor<4x5x3xf32>, tensor<4x3xi64>) -> tensor<f32>
  %l0 = ds.softmax_cross_entropy_loss %scores, %labels {reduction = "mean", ignore_index = -100 : i64} : (tensor<4x5x3xf32>, tensor<4x3xi64>) -> tensor<f32>
  // CHECK: ds.softmax_cross_entropy_loss %{{.*}}, %{{.*}}, %{{.*}} {reduction = "none"} : (tensor<4x5x3xf32>, tensor<4x3xi64>, tensor<5xf32>) -> (tensor<4x3xf32>, tensor<4x5x3xf32>)
  %l1, %lp = ds.softmax_cross_entropy_loss %scores, %labels, %w {reduction = "none"} : (tensor<4x5x3xf32>, tensor<4x3xi64>, tensor<5xf32>) -> (tensor<4x3xf32>, tensor<4x5x3xf32>)
  // CHECK: ds.nll_loss %{{.*}}, %{{.*}} {reduction = "sum"} : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<f32>
  %l2 = ds.nll_loss %logp, %t {reduction = "sum"} : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<f32>
  return %y, %mask, %l0, %l1, %lp, %l2 : tensor<4x8xf32>, tensor<4x8xi1>, tensor<f32>, tensor<4x3xf32>, tensor<4x5x3xf32>, tensor<f32>
}

// Collectives and the loss scaler's overflow check.
// CHECK-LABEL: func.func @collectives
func.func @collectives(%s: tensor<3xf32>, %w: tensor<15xf32>, %g: tensor<4x3xf32>, %h: tensor<2xbf16>) -> (tensor<15xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<f32>) {
  // CHECK: ds.all_gather %{{.*}} {group = 0 : i64} : tensor<3xf32> -> tensor<15xf32>
  %0 = ds.all_gather %s {group = 0 : i64} : tensor<3xf32> -> tensor<15xf32>
  // CHECK: ds.reduce_scatter %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<15xf32> -> tensor<3xf32>
  %1 = ds.reduce_scatter %w {reduction = "mean", group = 0 : i64} : tensor<15xf32> -> tensor<3xf32>
  // CHECK: ds.shard %{{.*}} {group = 0 : i64} : tensor<15xf32> -> tensor<3xf32>
  %2 = ds.shard %w {group = 0 : i64} : tensor<15xf32> -> tensor<3xf32>
  // CHECK: ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "sum"} : tensor<4x3xf32>
  %3 = ds.all_reduce %g {reduction = "sum", group = 0 : i64} : tensor<4x3xf32>
  // CHECK: ds.check_overflow %{{.*}}, %{{.*}} : (tensor<4x3xf32>, tensor<2xbf16>) -> tensor<f32>
  %4 = ds.check_overflow %g, %h : (tensor<4x3xf32>, tensor<2xbf16>) -> tensor<f32>
  return %0, %1, %2, %3, %4 : tensor<15xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<f32>
}

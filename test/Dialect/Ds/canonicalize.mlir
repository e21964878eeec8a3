// Folding of shape arithmetic and canonicalization of identities.
// RUN: ds-opt %s -canonicalize -split-input-file | FileCheck %s

// PyTorch's view(B, T, H, D) arithmetic: Shape -> Gather -> Unsqueeze ->
// Concat folds to one constant, and the reshape keeps only its input.
// CHECK-LABEL: func.func @view_arithmetic
// CHECK-DAG: %[[R:.*]] = ds.reshape %arg0 : tensor<2x8xf32> -> tensor<2x2x4xf32>
// CHECK-DAG: %[[C:.*]] = ds.constant dense<[2, 2, 4]> : tensor<3xi64>
// CHECK-NOT: ds.shape
// CHECK-NOT: ds.gather
// CHECK: return %[[R]], %[[C]]
func.func @view_arithmetic(%x: tensor<2x8xf32>) -> (tensor<2x2x4xf32>, tensor<3xi64>) {
  %s = ds.shape %x {start = 0 : i64, end = 2 : i64} : tensor<2x8xf32> -> tensor<2xi64>
  %i0 = ds.constant dense<0> : tensor<i64>
  %i1 = ds.constant dense<1> : tensor<i64>
  %b = ds.gather %s, %i0 {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %t = ds.gather %s, %i1 {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %h = ds.constant dense<2> : tensor<i64>
  %d = ds.div %t, %h : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %ub = ds.reshape %b : tensor<i64> -> tensor<1xi64>
  %uh = ds.reshape %h : tensor<i64> -> tensor<1xi64>
  %ud = ds.reshape %d : tensor<i64> -> tensor<1xi64>
  %shape = ds.concat %ub, %uh, %ud {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %r = ds.reshape %x : tensor<2x8xf32> -> tensor<2x2x4xf32>
  return %r, %shape : tensor<2x2x4xf32>, tensor<3xi64>
}

// -----

// A causal mask from Range, comparisons and Not folds to a bool constant.
// CHECK-LABEL: func.func @causal_mask
// CHECK-NEXT: %[[M:.*]] = ds.constant dense<{{\[}}[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>
// CHECK-NEXT: return %[[M]]
func.func @causal_mask() -> tensor<3x3xi1> {
  %z = ds.constant dense<0> : tensor<i64>
  %n = ds.constant dense<3> : tensor<i64>
  %o = ds.constant dense<1> : tensor<i64>
  %r = ds.range %z, %n, %o : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<3xi64>
  %row = ds.reshape %r : tensor<3xi64> -> tensor<3x1xi64>
  %col = ds.reshape %r : tensor<3xi64> -> tensor<1x3xi64>
  %keep = ds.greater_or_equal %row, %col : (tensor<3x1xi64>, tensor<1x3xi64>) -> tensor<3x3xi1>
  %m = ds.not %keep : tensor<3x3xi1>
  return %m : tensor<3x3xi1>
}

// -----

// CHECK-LABEL: func.func @arith_constants
// CHECK-DAG: ds.constant dense<[-2, 1, 3]> : tensor<3xi64>
// CHECK-DAG: ds.constant dense<[1.500000e+00, 3.000000e+00]> : tensor<2xf32>
// CHECK-DAG: ds.constant dense<[2, -1]> : tensor<2xi64>
// CHECK-DAG: ds.constant dense<[true, false]> : tensor<2xi1>
// CHECK-DAG: ds.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NOT: ds.div
// CHECK-NOT: ds.mul
// CHECK: return
func.func @arith_constants() -> (tensor<3xi64>, tensor<2xf32>, tensor<2xi64>, tensor<2xi1>, tensor<f32>) {
  %a = ds.constant dense<[-7, 3, 10]> : tensor<3xi64>
  %b = ds.constant dense<3> : tensor<i64>
  // Integer division truncates toward zero, as ONNX says.
  %q = ds.div %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %f = ds.constant dense<[0.5, 1.0]> : tensor<2xf32>
  %s = ds.constant dense<3.0> : tensor<f32>
  %p = ds.mul %f, %s : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  // Float to int casts truncate toward zero.
  %g = ds.constant dense<[2.7, -1.5]> : tensor<2xf32>
  %c = ds.cast %g : tensor<2xf32> -> tensor<2xi64>
  %e = ds.equal %c, %c : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
  %k = ds.constant dense<[true, true]> : tensor<2xi1>
  %neq = ds.constant dense<[false, true]> : tensor<2xi1>
  %x = ds.xor %k, %neq : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  %four = ds.constant dense<4.0> : tensor<f32>
  %sq = ds.sqrt %four : tensor<f32>
  return %q, %p, %c, %x, %sq : tensor<3xi64>, tensor<2xf32>, tensor<2xi64>, tensor<2xi1>, tensor<f32>
}

// -----

// Integer division by zero is left to run time, not folded.
// CHECK-LABEL: func.func @no_fold_div_zero
// CHECK: ds.div
func.func @no_fold_div_zero() -> tensor<i64> {
  %a = ds.constant dense<1> : tensor<i64>
  %z = ds.constant dense<0> : tensor<i64>
  %q = ds.div %a, %z : (tensor<i64>, tensor<i64>) -> tensor<i64>
  return %q : tensor<i64>
}

// -----

// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>
// CHECK-NEXT: %[[B:.*]] = ds.add %[[X]], %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>)
// CHECK-NEXT: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]], %[[B]]
func.func @identities(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = ds.constant dense<0.0> : tensor<f32>
  %one = ds.constant dense<1.0> : tensor<f32>
  %0 = ds.add %x, %zero : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = ds.mul %one, %0 : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = ds.cast %1 : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = ds.transpose %2 {perm = array<i64: 0, 1>} : tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = ds.slice %3 {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<2x3xf32>
  %5 = ds.reshape %4 : tensor<2x3xf32> -> tensor<3x2xf32>
  %6 = ds.reshape %5 : tensor<3x2xf32> -> tensor<2x3xf32>
  %7 = ds.concat %6 {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %8 = ds.expand %7 : tensor<2x3xf32> -> tensor<2x3xf32>
  // Not an identity: the zero broadcasts %y up to the result.
  %zeros = ds.constant dense<0.0> : tensor<2x3xf32>
  %9 = ds.add %y, %zeros : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %10 = ds.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %4, %6, %7, %8, %x, %10 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_chain
// CHECK-NEXT: %[[R:.*]] = ds.reshape %arg0 : tensor<2x3x4xf32> -> tensor<24xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain(%x: tensor<2x3x4xf32>) -> tensor<24xf32> {
  %0 = ds.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = ds.reshape %0 : tensor<6x4xf32> -> tensor<24xf32>
  return %1 : tensor<24xf32>
}

// -----

// CHECK-LABEL: func.func @data_movement_constants
// CHECK-DAG: ds.constant dense<{{\[}}[1, 4], [2, 5], [3, 6]]> : tensor<3x2xi64>
// CHECK-DAG: ds.constant dense<[6, 4]> : tensor<2xi64>
// CHECK-DAG: ds.constant dense<{{\[}}[1, 2, 3, 7, 8]]> : tensor<1x5xi64>
// CHECK-DAG: ds.constant dense<7> : tensor<2x2xi64>
// CHECK-DAG: ds.constant dense<{{\[}}[1, 2, 0], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-DAG: ds.constant dense<{{\[}}[1, 2, 3], [1, 2, 3]]> : tensor<2x3xi64>
// CHECK-NOT: ds.transpose
// CHECK: return
func.func @data_movement_constants() -> (tensor<3x2xi64>, tensor<2xi64>, tensor<1x5xi64>, tensor<2x2xi64>, tensor<2x3xi64>, tensor<2x3xi64>) {
  %m = ds.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %t = ds.transpose %m {perm = array<i64: 1, 0>} : tensor<2x3xi64> -> tensor<3x2xi64>
  // Negative steps walk backwards; negative indices count from the end.
  %idx = ds.constant dense<[-1, 3]> : tensor<2xi64>
  %row = ds.reshape %m : tensor<2x3xi64> -> tensor<6xi64>
  %g = ds.gather %row, %idx {axis = 0 : i64} : (tensor<6xi64>, tensor<2xi64>) -> tensor<2xi64>
  %a = ds.constant dense<[[1, 2, 3]]> : tensor<1x3xi64>
  %b = ds.constant dense<[[7, 8]]> : tensor<1x2xi64>
  %c = ds.concat %a, %b {axis = 1 : i64} : (tensor<1x3xi64>, tensor<1x2xi64>) -> tensor<1x5xi64>
  %s = ds.constant dense<7> : tensor<1xi64>
  %e = ds.expand %s : tensor<1xi64> -> tensor<2x2xi64>
  %tri = ds.trilu %m {upper = false, k = 1 : i64} : tensor<2x3xi64>
  %e2 = ds.expand %a : tensor<1x3xi64> -> tensor<2x3xi64>
  return %t, %g, %c, %e, %tri, %e2 : tensor<3x2xi64>, tensor<2xi64>, tensor<1x5xi64>, tensor<2x2xi64>, tensor<2x3xi64>, tensor<2x3xi64>
}

// -----

// CHECK-LABEL: func.func @slice_constant
// CHECK-NEXT: %[[C:.*]] = ds.constant dense<[6, 4]> : tensor<2xi64>
// CHECK-NEXT: return %[[C]]
func.func @slice_constant() -> tensor<2xi64> {
  %m = ds.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %s = ds.slice %m {starts = array<i64: 5>, steps = array<i64: -2>} : tensor<6xi64> -> tensor<2xi64>
  return %s : tensor<2xi64>
}

// -----

// CHECK-LABEL: func.func @fill_and_range
// CHECK-DAG: ds.constant dense<2.500000e-01> : tensor<2x3xf32>
// CHECK-DAG: ds.constant dense<[0.000000e+00, 5.000000e-01, 1.000000e+00]> : tensor<3xf32>
// CHECK-NOT: ds.constant_of_shape
// CHECK-NOT: ds.range
func.func @fill_and_range(%s: tensor<2xi64>) -> (tensor<2x3xf32>, tensor<3xf32>) {
  %f = ds.constant_of_shape %s {value = 0.25 : f32} : tensor<2xi64> -> tensor<2x3xf32>
  %a = ds.constant dense<0.0> : tensor<f32>
  %b = ds.constant dense<1.5> : tensor<f32>
  %d = ds.constant dense<0.5> : tensor<f32>
  %r = ds.range %a, %b, %d : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  return %f, %r : tensor<2x3xf32>, tensor<3xf32>
}

// -----

// A splat condition picks one side of a where.
// CHECK-LABEL: func.func @where_splat
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK-NEXT: return %[[Y]]
func.func @where_splat(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %c = ds.constant dense<false> : tensor<4xi1>
  %w = ds.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

// Dropout that drops nothing disappears; a used mask becomes all true.
// CHECK-LABEL: func.func @dropout_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[T:.*]] = ds.constant dense<true> : tensor<4xi1>
// CHECK-NEXT: %[[D:.*]], %{{.*}} = ds.dropout %[[X]] {ratio = 1.000000e-01 : f64, training = true}
// CHECK-NEXT: return %[[X]], %[[X]], %[[T]], %[[D]]
func.func @dropout_identity(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi1>, tensor<4xf32>) {
  %a, %ma = ds.dropout %x {ratio = 0.0 : f64, training = true} : tensor<4xf32> -> tensor<4xf32>, tensor<4xi1>
  %b, %mb = ds.dropout %x {ratio = 0.5 : f64, training = false} : tensor<4xf32> -> tensor<4xf32>, tensor<4xi1>
  %c, %mc = ds.dropout %x {ratio = 0.1 : f64, training = true} : tensor<4xf32> -> tensor<4xf32>, tensor<4xi1>
  return %a, %b, %mb, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xi1>, tensor<4xf32>
}

// -----

// A transpose of a transpose: back to the source when the permutations
// cancel (autodiff's input gradient of x @ W^T), composed otherwise.
// CHECK-LABEL: func.func @transpose_twice
// CHECK-SAME: (%[[W:.*]]: tensor<3x4xf32>, %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[C:.*]] = ds.transpose %[[X]] {perm = array<i64: 2, 1, 0>} : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
// CHECK-NEXT: return %[[W]], %[[C]]
func.func @transpose_twice(%w: tensor<3x4xf32>, %x: tensor<2x3x4xf32>) -> (tensor<3x4xf32>, tensor<4x3x2xf32>) {
  %t = ds.transpose %w {perm = array<i64: 1, 0>} : tensor<3x4xf32> -> tensor<4x3xf32>
  %back = ds.transpose %t {perm = array<i64: 1, 0>} : tensor<4x3xf32> -> tensor<3x4xf32>
  %a = ds.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %b = ds.transpose %a {perm = array<i64: 2, 0, 1>} : tensor<3x2x4xf32> -> tensor<4x3x2xf32>
  return %back, %b : tensor<3x4xf32>, tensor<4x3x2xf32>
}

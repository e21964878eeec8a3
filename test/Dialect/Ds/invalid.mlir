// Every verifier rule of the ds dialect, one case each.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @dynamic_shape(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = ds.relu %x : tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

func.func @f64_unsupported(%x: tensor<4xf64>) -> tensor<4xf64> {
  // expected-error @+1 {{statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type}}
  %0 = ds.exp %x : tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

func.func @binary_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1 {{operand element types differ}}
  %0 = ds.add %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @binary_broadcast(%a: tensor<4xf32>, %b: tensor<3xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{shapes [4] and [3] do not broadcast}}
  %0 = ds.mul %a, %b : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @binary_result_shape(%a: tensor<2x1xf32>, %b: tensor<3xf32>) -> tensor<2x1xf32> {
  // expected-error @+1 {{result shape [2, 1] does not match the expected [2, 3]}}
  %0 = ds.sub %a, %b : (tensor<2x1xf32>, tensor<3xf32>) -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// -----

func.func @predicate_result(%a: tensor<4xi64>, %b: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{expects an i1 result}}
  %0 = ds.less %a, %b : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @logical_operands(%a: tensor<4xi64>, %b: tensor<4xi64>) -> tensor<4xi1> {
  // expected-error @+1 {{expects i1 operands}}
  %0 = ds.and %a, %b : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @arith_on_bool(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{does not take i1 operands}}
  %0 = ds.add %a, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @arith_result_type(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{result element type 'f16' differs from the operand's 'f32'}}
  %0 = ds.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @shape_range(%x: tensor<2x3xf32>) -> tensor<3xi64> {
  // expected-error @+1 {{expects 0 <= start <= end <= rank, got start 0, end 3, rank 2}}
  %0 = ds.shape %x {start = 0 : i64, end = 3 : i64} : tensor<2x3xf32> -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @shape_result(%x: tensor<2x3xf32>) -> tensor<1xi64> {
  // expected-error @+1 {{result must be tensor<2xi64>}}
  %0 = ds.shape %x {start = 0 : i64, end = 2 : i64} : tensor<2x3xf32> -> tensor<1xi64>
  return %0 : tensor<1xi64>
}

// -----

func.func @range_count() -> tensor<5xi64> {
  %a = ds.constant dense<0> : tensor<i64>
  %b = ds.constant dense<4> : tensor<i64>
  %d = ds.constant dense<1> : tensor<i64>
  // expected-error @+1 {{result has 5 elements, the operands give 4}}
  %r = ds.range %a, %b, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<5xi64>
  return %r : tensor<5xi64>
}

// -----

func.func @range_zero_delta() -> tensor<5xi64> {
  %a = ds.constant dense<0> : tensor<i64>
  %d = ds.constant dense<0> : tensor<i64>
  // expected-error @+1 {{delta must not be 0}}
  %r = ds.range %a, %a, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<5xi64>
  return %r : tensor<5xi64>
}

// -----

func.func @range_scalar(%a: tensor<2xi64>) -> tensor<5xi64> {
  // expected-error @+1 {{operands must be scalars}}
  %r = ds.range %a, %a, %a : (tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5xi64>
  return %r : tensor<5xi64>
}

// -----

func.func @constant_of_shape_value(%s: tensor<2xi64>) -> tensor<2x3xf32> {
  // expected-error @+1 {{value must be a scalar of the result element type 'f32'}}
  %0 = ds.constant_of_shape %s {value = 1 : i64} : tensor<2xi64> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @constant_of_shape_rank(%s: tensor<3xi64>) -> tensor<2x3xf32> {
  // expected-error @+1 {{shape operand must be tensor<2xi64>}}
  %0 = ds.constant_of_shape %s {value = 1.0 : f32} : tensor<3xi64> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @cast_shape(%x: tensor<4xf32>) -> tensor<2x2xf16> {
  // expected-error @+1 {{changes the shape}}
  %0 = ds.cast %x : tensor<4xf32> -> tensor<2x2xf16>
  return %0 : tensor<2x2xf16>
}

// -----

func.func @where_types(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1 {{x, y and result element types must agree}}
  %0 = ds.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @where_broadcast(%c: tensor<3xi1>, %x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{shapes [3] and [4] do not broadcast}}
  %0 = ds.where %c, %x, %y : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{matmul contraction mismatch: [2, 3] x [4, 5]}}
  %0 = ds.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_batch(%a: tensor<3x2x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<3x2x5xf32> {
  // expected-error @+1 {{shapes [3] and [2] do not broadcast}}
  %0 = ds.matmul %a, %b : (tensor<3x2x4xf32>, tensor<2x4x5xf32>) -> tensor<3x2x5xf32>
  return %0 : tensor<3x2x5xf32>
}

// -----

func.func @gemm_bias(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{gemm bias [3] does not broadcast to [2, 4]}}
  %0 = ds.gemm %a, %b, %c : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gemm_rank(%a: tensor<2x3x1xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{gemm operands must be 2-D}}
  %0 = ds.gemm %a, %b : (tensor<2x3x1xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @softmax_axis(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis 2 must be in [0, 2)}}
  %0 = ds.softmax %x {axis = 2 : i64} : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @log_softmax_axis(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis -1 must be in [0, 2)}}
  %0 = ds.log_softmax %x {axis = -1 : i64} : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @layer_norm_scale(%x: tensor<2x3xf32>, %s: tensor<2xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{scale and bias must have the normalized shape}}
  %0 = ds.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @gather_shape(%d: tensor<10x4xf32>, %i: tensor<3xi64>) -> tensor<4x4xf32> {
  // expected-error @+1 {{result shape [4, 4] does not match the expected [3, 4]}}
  %0 = ds.gather %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @gather_axis(%d: tensor<10x4xf32>, %i: tensor<3xi64>) -> tensor<3x4xf32> {
  // expected-error @+1 {{gather axis 2 out of range for rank 2}}
  %0 = ds.gather %d, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{changes the element count from 6 to 7}}
  %0 = ds.reshape %x : tensor<2x3xf32> -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

func.func @reshape_type(%x: tensor<2x3xf32>) -> tensor<6xf16> {
  // expected-error @+1 {{changes the element type}}
  %0 = ds.reshape %x : tensor<2x3xf32> -> tensor<6xf16>
  return %0 : tensor<6xf16>
}

// -----

func.func @expand_shape(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{does not broadcast to}}
  %0 = ds.expand %x : tensor<2x3xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @transpose_perm(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{invalid permutation [0, 0]}}
  %0 = ds.transpose %x {perm = array<i64: 0, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @concat_shapes(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{concat operands differ outside axis 0}}
  %0 = ds.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @split_sizes(%x: tensor<5x2xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{result sizes add up to 4, the input has 5}}
  %0:2 = ds.split %x {axis = 0 : i64} : tensor<5x2xf32> -> tensor<2x2xf32>, tensor<2x2xf32>
  return %0#0 : tensor<2x2xf32>
}

// -----

func.func @slice_bounds(%x: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{slice of dimension 0 (start 2, step 1, count 3) leaves [0, 4)}}
  %0 = ds.slice %x {starts = array<i64: 2>, steps = array<i64: 1>} : tensor<4xf32> -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @slice_step(%x: tensor<4xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{slice step of dimension 0 is 0}}
  %0 = ds.slice %x {starts = array<i64: 0>, steps = array<i64: 0>} : tensor<4xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

func.func @trilu_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs rank >= 2}}
  %0 = ds.trilu %x {upper = true, k = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_axes(%x: tensor<2x3xf32>) -> tensor<f32> {
  // expected-error @+1 {{reduction axes [1, 0] must be sorted, unique and in [0, 2)}}
  %0 = ds.reduce_sum %x {axes = array<i64: 1, 0>, keepdims = false} : tensor<2x3xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @reduce_result(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{result shape [2] does not match the expected [2, 1]}}
  %0 = ds.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<2x3xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @dropout_ratio(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{ratio 1.000000e+00 must be in [0, 1)}}
  %y, %m = ds.dropout %x {ratio = 1.0 : f64, training = true} : tensor<4xf32> -> tensor<4xf32>, tensor<4xi1>
  return %y : tensor<4xf32>
}

// -----

func.func @loss_reduction(%s: tensor<4x5xf32>, %l: tensor<4xi64>) -> tensor<f32> {
  // expected-error @+1 {{reduction 'avg' is not one of 'none', 'sum', 'mean'}}
  %0 = ds.softmax_cross_entropy_loss %s, %l {reduction = "avg"} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @loss_labels(%s: tensor<4x5xf32>, %l: tensor<5xi64>) -> tensor<f32> {
  // expected-error @+1 {{loss expects scores N x C x d1..dk and labels N x d1..dk, got [4, 5] and [5]}}
  %0 = ds.nll_loss %s, %l {reduction = "mean"} : (tensor<4x5xf32>, tensor<5xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @loss_weights(%s: tensor<4x5xf32>, %l: tensor<4xi64>, %w: tensor<4xf32>) -> tensor<f32> {
  // expected-error @+1 {{loss weights [4] must be [C] = [5]}}
  %0 = ds.nll_loss %s, %l, %w {reduction = "mean"} : (tensor<4x5xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @loss_none_shape(%s: tensor<4x5xf32>, %l: tensor<4xi64>) -> tensor<f32> {
  // expected-error @+1 {{result shape [] does not match the expected [4]}}
  %0 = ds.softmax_cross_entropy_loss %s, %l {reduction = "none"} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @gather_not_multiple(%s: tensor<4xf32>) -> tensor<10xf32> {
  // expected-error @+1 {{'ds.all_gather' op the whole (10 elements) is not a multiple of the shard (4)}}
  %0 = ds.all_gather %s {group = 0 : i64} : tensor<4xf32> -> tensor<10xf32>
  return %0 : tensor<10xf32>
}

// -----

func.func @scatter_2d(%w: tensor<2x4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.reduce_scatter' op needs 1-D tensors}}
  %0 = ds.reduce_scatter %w {reduction = "mean", group = 0 : i64} : tensor<2x4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scatter_max(%w: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'ds.reduce_scatter' op reduction 'max' is not one of 'sum', 'mean'}}
  %0 = ds.reduce_scatter %w {reduction = "max", group = 0 : i64} : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @shard_types(%w: tensor<8xf32>) -> tensor<4xbf16> {
  // expected-error @+1 {{'ds.shard' op element types differ}}
  %0 = ds.shard %w {group = 0 : i64} : tensor<8xf32> -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

func.func @overflow_result(%g: tensor<8xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'ds.check_overflow' op result must be an f32 scalar}}
  %0 = ds.check_overflow %g : (tensor<8xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

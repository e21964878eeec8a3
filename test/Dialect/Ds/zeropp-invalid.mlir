// The verifier rules of ds.quantized_all_gather and
// ds.quantized_reduce_scatter.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @not_shards(%s: tensor<6xf32>) {
  // expected-error @+1 {{the 20-element tensor is not whole shards of 6 elements}}
  %w = ds.quantized_all_gather %s {block_size = 4 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<20xf32>
  return
}

// -----

func.func @two_types(%s: tensor<6xf32>) {
  // expected-error @+1 {{expects 1-D input and result of one element type, got 'tensor<6xf32>' and 'tensor<12xbf16>'}}
  %w = ds.quantized_all_gather %s {block_size = 4 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<12xbf16>
  return
}

// -----

func.func @bits(%s: tensor<6xf32>) {
  // expected-error @+1 {{bits must be 8 or 4, got 2}}
  %w = ds.quantized_all_gather %s {block_size = 4 : i64, bits = 2 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<12xf32>
  return
}

// -----

func.func @zero_block(%s: tensor<6xf32>) {
  // expected-error @+1 {{attribute 'block_size' failed to satisfy constraint}}
  %w = ds.quantized_all_gather %s {block_size = 0 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<12xf32>
  return
}

// -----

func.func @scatter_bf16(%g: tensor<8xbf16>) {
  // expected-error @+1 {{expects f32 (the sum is accumulated in f32), got 'bf16'}}
  %r = ds.quantized_reduce_scatter %g {reduction = "mean", block_size = 4 : i64, group = 0 : i64} : tensor<8xbf16> -> tensor<4xbf16>
  return
}

// -----

func.func @scatter_max(%g: tensor<8xf32>) {
  // expected-error @+1 {{reduction must be 'sum' or 'mean', got 'max'}}
  %r = ds.quantized_reduce_scatter %g {reduction = "max", block_size = 4 : i64, group = 0 : i64} : tensor<8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @scatter_2d(%g: tensor<2x4xf32>) {
  // expected-error @+1 {{expects 1-D input and result of one element type}}
  %r = ds.quantized_reduce_scatter %g {reduction = "sum", block_size = 4 : i64, group = 0 : i64} : tensor<2x4xf32> -> tensor<4xf32>
  return
}

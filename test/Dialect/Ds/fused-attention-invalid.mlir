// The verifier rules of ds.fused_attention and ds.fused_attention_grad.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @kind(%q: tensor<2x8x16xf32>, %m: tensor<8x8xi1>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects mask_kind none, fill_true, fill_false or add, got 'causal'}}
  %o, %l = ds.fused_attention %q, %q, %q, %m {mask_kind = "causal", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @missing_mask(%q: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects a mask operand exactly when mask_kind is not 'none'}}
  %o, %l = ds.fused_attention %q, %q, %q {mask_kind = "add", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @mask_type(%q: tensor<2x8x16xf32>, %m: tensor<8x8xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects an i1 mask for mask_kind 'fill_true'}}
  %o, %l = ds.fused_attention %q, %q, %q, %m {mask_kind = "fill_true", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @mask_shape(%q: tensor<2x8x16xf32>, %m: tensor<3x8xi1>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{mask of shape [3, 8] does not broadcast to the scores' [2, 8, 8]}}
  %o, %l = ds.fused_attention %q, %q, %q, %m {mask_kind = "fill_false", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<3x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @head_size(%q: tensor<2x8x16xf32>, %k: tensor<2x8x8xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects query and key of one head size, got 16 and 8}}
  %o, %l = ds.fused_attention %q, %k, %q {mask_kind = "none", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @batch(%q: tensor<2x8x16xf32>, %k: tensor<3x8x16xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects query, key and value with the same batch dimensions}}
  %o, %l = ds.fused_attention %q, %k, %q {mask_kind = "none", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<3x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @lse(%q: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects an f32 result of shape [2, 8, 16] and an f32 lse of shape [2, 8]}}
  %o, %l = ds.fused_attention %q, %q, %q {mask_kind = "none", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return %o : tensor<2x8x16xf32>
}

// -----

func.func @grad_types(%q: tensor<2x8x16xf32>, %l: tensor<2x8xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{expects gradients of the query's, key's and value's types}}
  %a, %b, %c = ds.fused_attention_grad %q, %q, %q, %q, %l, %q {mask_kind = "none", scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>)
  return %a : tensor<2x8x16xf32>
}

// Chains of f32 elementwise ops fused into one kernel (issue 24 item 1).
// RUN: ds-opt %s --ds-fuse-elementwise -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fuse-elementwise --ds-lower-to-dsrt -split-input-file | FileCheck %s --check-prefix=LOWER

// Bias add and the tanh-GELU chain, 0.5 y (1 + tanh(0.79788456 (y + 0.044715 y^3))):
// one fused op over x and the broadcast bias; the splat constants become
// immediates (and their ds.constant ops go). x + b has three users, all in
// the chain: it fuses in the second sweep.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[F:.*]] = ds.fused_elementwise %arg0, %arg1 {constants = array<f64: 5.000000e-01, 3.000000e+00, 0.044714998453855515, 0.79788458347320556, 1.000000e+00>, program = array<i64: 1, 0, 1, 0, 3, 2, -1, 0, 5, 2, -2, 0, 3, 4, -3, 0, 1, 2, 5, 0, 3, 6, -4, 0, 15, 7, 0, 0, 1, 8, -5, 0, 3, 3, 9, 0>} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[F]]
// LOWER-LABEL: func.func @forward
// LOWER: dsrt.kernel "fused_elementwise"(%{{.*}}, %{{.*}}) -> (%{{.*}}) {inplace = array<i64: 0>, params = {constants = array<f64: {{.*}}>, program = array<i64: {{.*}}>}} : (memref<4x8xf32>, memref<8xf32>) -> (memref<4x8xf32>)
// LOWER-NEXT: dsrt.output
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"}, %b: tensor<8xf32> {ds.input = "b"})
    -> (tensor<4x8xf32> {ds.output = "y"}) {
  %c3 = ds.constant dense<3.0> : tensor<f32>
  %c0 = ds.constant dense<0.044715> : tensor<f32>
  %c1 = ds.constant dense<0.7978845608> : tensor<f32>
  %one = ds.constant dense<1.0> : tensor<f32>
  %half = ds.constant dense<0.5> : tensor<f32>
  %y = ds.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y3 = ds.pow %y, %c3 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t0 = ds.mul %y3, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t1 = ds.add %y, %t0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t2 = ds.mul %t1, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t3 = ds.tanh %t2 : tensor<4x8xf32>
  %t4 = ds.add %t3, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t5 = ds.mul %y, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %g = ds.mul %t5, %t4 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}

// -----

// A producer with a second user is not fused (its value is needed whole):
// exp stays, and so do its two consumers (each a single op).
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.fused_elementwise
// CHECK: ds.exp
// CHECK: ds.add
// CHECK: ds.mul
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"})
    -> (tensor<4x8xf32> {ds.output = "a"}, tensor<4x8xf32> {ds.output = "b"}) {
  %one = ds.constant dense<1.0> : tensor<f32>
  %e = ds.exp %x : tensor<4x8xf32>
  %a = ds.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %b = ds.mul %e, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Broadcast: a producer of a smaller shape ([8], read by a [4, 8] op) is
// not recomputed per element: it stays, and the fused op reads its result
// by strides. The residual add and the scale fuse.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[E:.*]] = ds.exp %arg1 : tensor<8xf32>
// CHECK-NEXT: %[[F:.*]] = ds.fused_elementwise %arg0, %[[E]], %arg2 {program = array<i64: 3, 0, 1, 0, 1, 3, 2, 0>} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[F]]
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"}, %s: tensor<8xf32> {ds.input = "s"},
                   %r: tensor<4x8xf32> {ds.input = "r"})
    -> (tensor<4x8xf32> {ds.output = "y"}) {
  %e = ds.exp %s : tensor<8xf32>
  %m = ds.mul %x, %e : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = ds.add %m, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Attention's scale and causal mask: the i1 mask is an input read as
// where's condition, -inf an immediate.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[F:.*]] = ds.fused_elementwise %arg0, %arg1 {constants = array<f64: 1.250000e-01, 0xFFF0000000000000>, program = array<i64: 3, 0, -1, 0, 18, 1, -2, 2>} : (tensor<2x8x8xf32>, tensor<8x8xi1>) -> tensor<2x8x8xf32>
// CHECK-NEXT: return %[[F]]
func.func @forward(%s: tensor<2x8x8xf32> {ds.input = "s"}, %m: tensor<8x8xi1> {ds.input = "m"})
    -> (tensor<2x8x8xf32> {ds.output = "y"}) {
  %scale = ds.constant dense<0.125> : tensor<f32>
  %ninf = ds.constant dense<0xFF800000> : tensor<f32>
  %t = ds.mul %s, %scale : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
  %y = ds.where %m, %ninf, %t : (tensor<8x8xi1>, tensor<f32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}

// -----

// Boundaries: a recompute copy does not absorb an op that is not one, and
// nothing crosses the optimizer's first step; 16-bit ops are not fused.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.fused_elementwise
func.func @forward(%x: tensor<4xf32> {ds.input = "x"}, %h: tensor<4xf16> {ds.input = "h"})
    -> (tensor<4xf32> {ds.output = "y"}, tensor<4xf16> {ds.output = "z"}) {
  %e = ds.exp %x : tensor<4xf32>
  %y = ds.tanh %e {ds.recompute} : tensor<4xf32>
  %a = ds.exp %h : tensor<4xf16>
  %z = ds.tanh %a : tensor<4xf16>
  return %y, %z : tensor<4xf32>, tensor<4xf16>
}

// The GPT example's training step (erf GELU, 4 layers): 139 kernels
// without the pass, 111 with it, 12 of them fused (the GELUs and their
// gradients, the attention scale and mask, the layer-norm and loss chains);
// the 28 Adam updates are one multi_adam kernel (--fuse-optimizer).
// RUN: ds-opt %ds_src/examples/gpt/gpt.onnx --optimizer=adam --fuse-elementwise --emit=dsrt -o %t.on.dsrt 2>/dev/null
// RUN: ds-opt %ds_src/examples/gpt/gpt.onnx --optimizer=adam --emit=dsrt -o %t.off.dsrt 2>/dev/null
// RUN: grep -c 'dsrt.kernel' %t.on.dsrt | FileCheck %s --check-prefix=ON
// RUN: grep -c 'dsrt.kernel' %t.off.dsrt | FileCheck %s --check-prefix=OFF
// RUN: grep -c 'kernel "fused_elementwise"' %t.on.dsrt | FileCheck %s --check-prefix=FUSED
// RUN: not grep -q fused_elementwise %t.off.dsrt
// ON: {{^}}111{{$}}
// OFF: {{^}}139{{$}}
// FUSED: {{^}}12{{$}}

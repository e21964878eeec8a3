// The cost model per op: FLOPs (multiply-add = 2), bytes read and written.
// RUN: ds-opt %s --ds-print-cost -verify-diagnostics -split-input-file

// expected-remark @+1 {{total flops=2112 read=1600 written=768}}
func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  // 2*4*16*8 = 1024 flops; reads (32 + 128) * 4 bytes, writes 64 * 4.
  // expected-remark @+1 {{flops=1024 read=640 written=256}}
  %0 = ds.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // expected-remark @+1 {{flops=64 read=320 written=256}}
  %1 = ds.add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // expected-remark @+1 {{flops=1024 read=640 written=256}}
  %2 = ds.gemm %x, %w {alpha = 1.0 : f32} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}

// -----

// Data movement costs no FLOPs; f16 and i1 tensors count 2 and 1 bytes.
// expected-remark @+1 {{total flops=0 read=96 written=96}}
func.func @movement(%x: tensor<4x8xf16>, %m: tensor<4x8xi1>) -> (tensor<8x4xf16>, tensor<32xi1>) {
  // expected-remark @+1 {{flops=0 read=64 written=64}}
  %0 = ds.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf16> -> tensor<8x4xf16>
  // expected-remark @+1 {{flops=0 read=32 written=32}}
  %1 = ds.reshape %m : tensor<4x8xi1> -> tensor<32xi1>
  return %0, %1 : tensor<8x4xf16>, tensor<32xi1>
}

// -----

// expected-remark @+1 {{total flops=1032 read=864 written=516}}
func.func @norms(%x: tensor<4x16xf32>, %s: tensor<16xf32>, %l: tensor<4xi64>) -> (tensor<4x16xf32>, tensor<f32>) {
  // 8 per element.
  // expected-remark @+1 {{flops=512 read=320 written=256}}
  %0 = ds.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // 5 per score plus 2 per label.
  // expected-remark @+1 {{flops=328 read=288 written=4}}
  %1 = ds.softmax_cross_entropy_loss %0, %l {reduction = "mean"} : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  // 3 per element.
  // expected-remark @+1 {{flops=192 read=256 written=256}}
  %2 = ds.sigmoid %0 : tensor<4x16xf32>
  return %0, %1 : tensor<4x16xf32>, tensor<f32>
}

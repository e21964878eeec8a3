// ZeRO++'s quantized collectives (DsZeroPP.td): ds.quantized_all_gather
// (qwZ, a 6-element shard over 4 ranks) and ds.quantized_reduce_scatter
// (qgZ, 4 chunks of 5 at 4 bits); the round trip.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @gather
func.func @gather(%s: tensor<6xf32>, %h: tensor<6xbf16>) -> (tensor<24xf32>, tensor<24xbf16>) {
  // 8 bits, the default, is not printed.
  // CHECK: ds.quantized_all_gather %{{.*}} {block_size = 4 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<24xf32>
  %w = ds.quantized_all_gather %s {block_size = 4 : i64, bits = 8 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<24xf32>
  // The default is 8 bits; 16-bit shards are gathered as they are.
  // CHECK: ds.quantized_all_gather %{{.*}} {block_size = 2048 : i64, group = 0 : i64} : tensor<6xbf16> -> tensor<24xbf16>
  %b = ds.quantized_all_gather %h {block_size = 2048 : i64, group = 0 : i64} : tensor<6xbf16> -> tensor<24xbf16>
  return %w, %b : tensor<24xf32>, tensor<24xbf16>
}

// CHECK-LABEL: func.func @scatter
func.func @scatter(%g: tensor<20xf32>) -> tensor<5xf32> {
  // CHECK: ds.quantized_reduce_scatter %{{.*}} {bits = 4 : i64, block_size = 3 : i64, group = 0 : i64, reduction = "mean"} : tensor<20xf32> -> tensor<5xf32>
  %r = ds.quantized_reduce_scatter %g {reduction = "mean", block_size = 3 : i64, bits = 4 : i64, group = 0 : i64} : tensor<20xf32> -> tensor<5xf32>
  return %r : tensor<5xf32>
}

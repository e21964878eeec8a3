// Data parallelism and ZeRO stages 0-3 on a one-layer model.
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=2' | FileCheck %s --check-prefix=Z0
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=1' | FileCheck %s
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=5 stage=1' --ds-optimizer | FileCheck %s --check-prefix=Z1
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=5 stage=2' --ds-optimizer | FileCheck %s --check-prefix=Z2
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=5 stage=3' --ds-optimizer | FileCheck %s --check-prefix=Z3
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=5 stage=3 param-persistence-threshold=13' --ds-optimizer | FileCheck %s --check-prefix=KEEP
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=2 stage=1' '--ds-optimizer=grad-clip=1.0' | FileCheck %s --check-prefix=CLIP
// RUN: not ds-opt %s --ds-autodiff '--ds-zero=world-size=2 stage=4' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: ds-opt %s --ds-autodiff '--ds-zero=world-size=2 stage=1' '--ds-optimizer=optimizer=lamb' | FileCheck %s --check-prefix=LAMB
// RUN: not ds-opt %s '--ds-zero=world-size=2' 2>&1 | FileCheck %s --check-prefix=NOGRAD

// Stage 0: every gradient (as soon as it is computed) and the loss become
// the mean over ranks.
// Z0-LABEL: func.func @forward
// Z0-SAME: attributes {ds.world_size = 2 : i64, ds.zero_stage = 0 : i64}
// Z0: %[[G:.*]] = ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<4x3xf32>
// Z0: %[[L:.*]] = ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<f32>
// Z0: return %[[L]], %[[G]]
// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {ds.world_size = 1 : i64, ds.zero_stage = 0 : i64}
// CHECK-NOT: ds.all_reduce

// Stage 1: the 12-element gradient, padded to 15, is reduce-scattered after
// the backward pass; Adam updates this rank's 3 elements; the new shards are
// gathered into the whole parameter. The state holds 3 elements.
// Z1-LABEL: func.func @forward
// Z1-SAME: %arg1: tensor<4x3xf32> {ds.param = "w", ds.trainable}
// Z1-SAME: tensor<3xf32> {ds.full_shape = array<i64: 4, 3>, ds.state = "w.exp_avg"}
// Z1-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<4x3xf32> {ds.output = "update:w", ds.update = "w"}, tensor<3xf32>
// Z1: %[[GW:.*]] = ds.matmul %{{.*}} : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// Z1: ds.all_reduce
// Z1: %[[GF:.*]] = ds.reshape %[[GW]] : tensor<4x3xf32> -> tensor<12xf32>
// Z1: %[[GP:.*]] = ds.concat %[[GF]], %{{.*}} {axis = 0 : i64} : (tensor<12xf32>, tensor<3xf32>) -> tensor<15xf32>
// Z1: %[[GS:.*]] = ds.reduce_scatter %[[GP]] {group = 0 : i64, reduction = "mean"} : tensor<15xf32> -> tensor<3xf32>
// Z1: %[[PS:.*]] = ds.shard %{{.*}} {group = 0 : i64} : tensor<15xf32> -> tensor<3xf32>
// Z1: %[[NEW:.*]], %{{.*}}, %{{.*}} = ds.adam %[[PS]], %[[GS]]
// Z1: %[[ALL:.*]] = ds.all_gather %[[NEW]] {group = 0 : i64} : tensor<3xf32> -> tensor<15xf32>
// Z1: %[[W:.*]] = ds.slice %[[ALL]] {{.*}} : tensor<15xf32> -> tensor<12xf32>
// Z1: %[[WR:.*]] = ds.reshape %[[W]] : tensor<12xf32> -> tensor<4x3xf32>
// Z1: return %{{.*}}, %[[WR]]

// Stage 2: the reduce-scatter follows the gradient's matmul at once.
// Z2-LABEL: func.func @forward
// Z2: ds.matmul %{{.*}} : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// Z2-NEXT: ds.reshape
// Z2-NEXT: ds.constant
// Z2-NEXT: ds.concat
// Z2-NEXT: ds.reduce_scatter

// Stage 3: the parameter is a 3-element shard, gathered before the forward
// matmul and again before the backward one (whose transpose is recomputed
// from the second gather); Adam updates the shard in place.
// Z3-LABEL: func.func @forward
// Z3-SAME: %arg1: tensor<3xf32> {ds.full_shape = array<i64: 4, 3>, ds.param = "w", ds.trainable}
// Z3-SAME: -> (tensor<f32> {ds.loss, ds.output = "loss"}, tensor<3xf32> {ds.output = "update:w", ds.update = "w"}
// Z3: %[[G1:.*]] = ds.all_gather %arg1 {group = 0 : i64} : tensor<3xf32> -> tensor<15xf32>
// Z3: %[[S1:.*]] = ds.slice %[[G1]]
// Z3: %[[W1:.*]] = ds.reshape %[[S1]] : tensor<12xf32> -> tensor<4x3xf32>
// Z3: ds.matmul %arg0, %[[W1]]
// Z3: ds.softmax_cross_entropy_loss
// Z3: ds.loss_grad
// Z3: %[[G2:.*]] = ds.all_gather %arg1 {group = 0 : i64} : tensor<3xf32> -> tensor<15xf32>
// Z3: %[[S2:.*]] = ds.slice %[[G2]]
// Z3: %[[W2:.*]] = ds.reshape %[[S2]] : tensor<12xf32> -> tensor<4x3xf32>
// Z3: ds.transpose %[[W2]]
// Z3: ds.reduce_scatter
// Z3: ds.adam %arg1,
// Z3-NOT: ds.all_gather
// Z3: return

// Stage 3 keeps parameters under the threshold whole (reduced like stage 2).
// KEEP-LABEL: func.func @forward
// KEEP-SAME: %arg1: tensor<4x3xf32> {ds.param = "w", ds.trainable}
// KEEP: ds.reduce_scatter
// KEEP: ds.shard
// KEEP: ds.all_gather

// Clipping over shards: the squares of this rank's shard, summed over ranks.
// CLIP: ds.reduce_scatter
// CLIP: ds.mul
// CLIP: ds.reduce_sum
// CLIP: ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "sum"} : tensor<f32>
// CLIP: ds.sqrt

// STAGE: error: ZeRO stage must be 0, 1, 2 or 3, got 4
// Lamb over shards: each rank updates its shard; the kernel sums the
// shard's squares over the ranks (norm_over_ranks), so that the trust
// ratio is the whole tensor's.
// LAMB: ds.reduce_scatter
// LAMB: ds.adam {{.*}}lamb = true{{.*}}norm_over_ranks = true{{.*}} : (tensor<6xf32>
// NOGRAD: error: data parallelism needs gradients: run --ds-autodiff first
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----
// Buckets: with the default sizes both gradients go through one
// reduce-scatter and both parameters through one gather per pass; with
// size 1 every tensor has its own collectives.
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=3' --ds-optimizer | FileCheck %s --check-prefix=BUCKET
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=3 reduce-bucket-size=1 prefetch-bucket-size=1' --ds-optimizer | FileCheck %s --check-prefix=SINGLE
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=3 reduce-bucket-size=1 prefetch-bucket-size=1' --ds-optimizer | FileCheck %s --check-prefix=SINGLERS
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2' --ds-optimizer | FileCheck %s --check-prefix=GATHER2
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2' '--ds-optimizer=allgather-bucket-size=1' | FileCheck %s --check-prefix=GATHER1
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=0' | FileCheck %s --check-prefix=REDUCE0
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2 comm-dtype=bf16' | FileCheck %s --check-prefix=COMM
// COMM: ds.cast %{{.*}} : tensor<3x3xf32> -> tensor<3x3xbf16>
// COMM: ds.reduce_scatter %{{.*}} : tensor<22xbf16> -> tensor<11xbf16>
// COMM: ds.cast %{{.*}} : tensor<5xbf16> -> tensor<5xf32>
// BUCKET: %[[C:.*]] = ds.concat %arg1, %arg2 {axis = 0 : i64} : (tensor<6xf32>, tensor<5xf32>) -> tensor<11xf32>
// BUCKET-NEXT: %[[G:.*]] = ds.all_gather %[[C]] {group = 0 : i64} : tensor<11xf32> -> tensor<22xf32>
// BUCKET-NEXT: %[[R:.*]] = ds.reshape %[[G]] : tensor<22xf32> -> tensor<2x11xf32>
// BUCKET-NEXT: ds.split %[[R]] {axis = 1 : i64} : tensor<2x11xf32> -> tensor<2x6xf32>, tensor<2x5xf32>
// BUCKET: ds.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x5xf32>, tensor<2x6xf32>) -> tensor<2x11xf32>
// BUCKET: %[[RS:.*]] = ds.reduce_scatter %{{.*}} : tensor<22xf32> -> tensor<11xf32>
// BUCKET: %[[P:.*]]:2 = ds.split %[[RS]] {axis = 0 : i64} : tensor<11xf32> -> tensor<5xf32>, tensor<6xf32>
// BUCKET: ds.adam %arg1, %[[P]]#1
// BUCKET: ds.adam %arg2, %[[P]]#0
// BUCKET-NOT: ds.reduce_scatter
// SINGLE-COUNT-4: ds.all_gather %arg
// SINGLE-NOT: ds.all_gather
// SINGLERS-COUNT-2: ds.reduce_scatter
// SINGLERS-NOT: ds.reduce_scatter
// GATHER2: ds.all_gather %{{.*}} : tensor<11xf32> -> tensor<22xf32>
// GATHER2-NOT: ds.all_gather
// GATHER1-COUNT-2: ds.all_gather
// GATHER1-NOT: ds.all_gather
// REDUCE0: ds.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<9xf32>, tensor<12xf32>) -> tensor<21xf32>
// REDUCE0-NEXT: %[[B:.*]] = ds.all_reduce %{{.*}} : tensor<21xf32>
// REDUCE0-NEXT: ds.all_reduce %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<f32>
// REDUCE0-NEXT: ds.split %[[B]]
// REDUCE0-NOT: ds.all_reduce

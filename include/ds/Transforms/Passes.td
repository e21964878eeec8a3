//===- Passes.td - ds passes -------------------------------*- tablegen -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_PASSES_TD
#define DS_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintSplitAxesPass : Pass<"ds-print-split-axes", "func::FuncOp"> {
  let summary = "Report how a split of each operand axis passes through each op";
  let description = [{
    Emits a remark on every op that implements `SplitAxisOpInterface`: for
    each ranked operand, the result axis that carries a split of each of
    its axes (`-` where the split cannot pass). It changes nothing; it
    shows the rules tensor and sequence parallelism propagate with.

    ```mlir
    %0 = ds.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    // remark: split axes: [0 -] [- 1]
    ```
  }];
}

def PrintCostPass : Pass<"ds-print-cost", "func::FuncOp"> {
  let summary = "Report the cost model's FLOPs and bytes of every ds op";
  let description = [{
    Emits a remark on every op that implements `CostOpInterface` with its
    FLOPs, bytes read and bytes written, and one on the function with the
    totals. It changes nothing; it shows what the recompute and schedule
    passes will see.

    ```mlir
    %0 = ds.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    // remark: flops=1024 read=640 written=256
    ```
  }];
  let dependentDialects = ["::mlir::ds::DsDialect"];
}

def AutodiffPass : Pass<"ds-autodiff", "func::FuncOp"> {
  let summary = "Reverse-mode gradients of the loss for every trainable parameter";
  let description = [{
    Walks `@forward` backwards from the result marked `ds.loss` (seeded with
    1), asking each op's `VJPOpInterface` for the gradients of its operands;
    a value used several times (a tied embedding) sums its gradients. The
    gradient of every argument marked `ds.trainable` is appended to the
    results with `ds.grad = "<param>"` and `ds.output = "grad:<param>"`
    (zeros for a parameter the loss does not reach). An op on the path to
    the loss without a gradient rule is an error naming it.

    A pipeline stage (`ds.pipeline` on the function) starts its backward
    after a `ds.pipe_mark`: each `ds.pipe_send` marked `ds.needs_grad` is
    seeded with a `ds.pipe_recv` of its gradient from the next stage (tag
    plus 1), the last stage's loss as above, and the gradient of each
    received `ds.pipe_recv` marked `ds.needs_grad` is sent back.
  }];
}

def MixedPrecisionPass : Pass<"ds-mixed-precision", "func::FuncOp"> {
  let summary = "16-bit weights and compute, with f32 islands";
  let description = [{
    Runs on the forward pass, before `--ds-autodiff`. Trainable f32
    parameters become arguments of the 16-bit type of `precision` (bf16 or
    fp16): the weights the step computes with and keeps. Every float op
    computes in that type, its other f32 operands (graph inputs, buffers,
    constants) cast down once; ops with the `Ds_F32Island` trait (softmax,
    log_softmax, LayerNorm, the losses, reductions) compute in f32, their
    16-bit operands cast up. Graph results keep their types. Autodiff then
    differentiates through the casts, so gradients flow in 16 bits, and
    `--ds-optimizer` updates each 16-bit weight through an f32 master copy.
    With fp16 the function gains the scalar input `ds.loss_scale` that
    autodiff seeds the backward pass with.

    ```mlir
    func.func @forward(%x: tensor<2x4xf32>, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable})
    %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    // becomes
    func.func @forward(%x: tensor<2x4xf32>, %w: tensor<4x3xbf16> {ds.param = "w", ds.trainable})
    %x16 = ds.cast %x : tensor<2x4xf32> -> tensor<2x4xbf16>
    %h = ds.matmul %x16, %w : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"bf16\"",
           "fp32, fp16 or bf16">,
    Option<"autoCast", "auto-cast", "bool", "false",
           "fp16: round the f32 graph inputs (not parameters, buffers or "
           "integer inputs) to fp16 first, f32 islands included "
           "(DeepSpeed's fp16.auto_cast)">,
  ];
}

def RecomputePass : Pass<"ds-recompute", "func::FuncOp"> {
  let summary = "Recompute forward segments in the backward pass to save memory";
  let description = [{
    Runs after `--ds-autodiff` (and before `--ds-zero`). The forward pass is
    cut into segments at its cut points: positions where exactly one
    tensor computed from the data crosses (the residual stream between
    transformer half-blocks, the input of an MLP layer...); values computed
    from arguments and constants alone do not count. Found on any DAG, so
    a graph without cut points is one segment and keeps everything.

    Each segment's saved bytes `A` (its values the backward pass reads,
    besides the cut value it ends with, which is always kept) and forward
    FLOPs `F` (of the ops those values need, from the cost interface) form
    the cost model. A recomputed segment is cloned just before the first
    backward use of its values, from its kept input; the clones carry
    `ds.recompute` (so CSE does not merge them back) and the backward
    pass reads them instead. With `mode`:
    - `none`: keep everything;
    - `full`: recompute every segment;
    - `every-layer`: keep only layer inputs (Megatron/DeepSpeed's usual
      choice); layers are the repeating runs of segments with the same
      ops, found by their op sequences, not by names;
    - `budget`: the cheapest set of segments (least extra FLOPs) such that
      the kept bytes plus the largest recomputed segment's fit `budget`
      bytes: exact, by enumerating the largest recomputed segment and
      solving the covering knapsack over the remaining ones (grouped by
      identical cost, as repeated blocks are).

    The function gets a `ds.recompute` summary attribute (segments, their
    costs, the choice, and the saved bytes and extra FLOPs of none,
    every-layer, full and the choice) for `ds-opt --report`.
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"none\"",
           "none, full, every-layer or budget">,
    Option<"budget", "budget", "int64_t", "0",
           "budget mode: bytes of activations the backward pass may read">,
  ];
}

def ZeroPass : Pass<"ds-zero", "func::FuncOp"> {
  let summary = "Data parallelism with ZeRO stages 0-3 (gradient and parameter partitioning)";
  let description = [{
    Runs after `--ds-autodiff` and before `--ds-optimizer`; every rank runs
    the step on its slice of the global batch, and the loss becomes the
    `ds.all_reduce` mean over ranks.

    - Stage 0: every gradient becomes its `ds.all_reduce` mean.
    - Stages 1-3: every gradient is flattened, padded with zeros to a
      multiple of `world-size` and `ds.reduce_scatter`ed (mean): each rank
      keeps the 1-D shard the optimizer updates (the optimizer pass then
      keeps state for that shard only and, for a whole parameter, gathers
      the updated shards). Stage 1 reduces after the whole backward pass,
      so full gradients live until then; stages 2 and 3 right after each
      gradient is computed.
    - Stage 3: every parameter with at least
      `param-persistence-threshold` elements becomes its shard (argument
      attribute `ds.full_shape` keeps the whole shape) and is
      `ds.all_gather`ed before its first use in the forward pass and again
      before its first use in the backward pass: trainable ones, frozen
      ones and float buffers alike, except a buffer that a result of the
      step writes (`ds.update`, BatchNorm's running statistics) and
      integer buffers, which stay whole. Values computed from the
      parameter alone that the backward pass reads (a transposed weight)
      are recomputed from the second gather. A bucket holds one element
      type (a frozen f32 tensor beside 16-bit weights is gathered apart).

    - A pipeline stage (`ds.pipeline`) with `accum-steps` M > 1 at stages
      0-1 (and at stages 2-3 with `sum-once`): the update section runs
      once per step, after the last micro-batch (DeepSpeed's pipeline
      engine). Each gradient is added
      to a full-size f32 accumulator (`ds.state = "<param>.grad_accum"`,
      updated in place) as soon as the backward makes it, the pass
      inserts `ds.pipe_mark {update}`, and the accumulated gradients are
      reduced after it, once per step instead of once per micro-batch;
      the function is marked `ds.accumulate_once = M` for the optimizer
      pass (which divides by M and zeroes the accumulators). Stages 2
      and 3 otherwise keep their per-micro-batch reduce-scatter, as
      with `--grad-accum` (their gradients never live whole past their
      production, which a full-size accumulator would undo); `sum-once`
      asks for the accumulator anyway, for an optimizer whose exchange
      runs once per step (1-bit Adam, 1-bit LAMB).

    Collectives are bucketed as DeepSpeed does: gradients, in the order
    the backward pass produces them, are reduced together until a bucket
    holds `reduce-bucket-size` elements (the tensors are concatenated so
    that each rank's part of every tensor is contiguous, then split); stage
    3 gathers parameters, in the order of their first use in each pass,
    together until `prefetch-bucket-size` elements, before the first use
    of the bucket's first parameter (later parameters of the bucket are
    prefetched). A size of 1 gives one collective per tensor.

    ZeRO++ (docs/zeropp.md): `quantize-weights` turns stage 3's gathers
    into `ds.quantized_all_gather` (block-wise int8, the shards themselves
    stay f32), `quantize-gradients` turns the gradients' reduce-scatters
    into `ds.quantized_reduce_scatter` (int8 or int4 by all-to-all, summed
    in f32). `hpz-partition-size` H > 1 (hpZ) keeps, after each forward
    gather, this rank's 1/H of every parameter (a secondary partition over
    group 2, its node's H consecutive ranks) and builds the backward
    gathers as `ds.all_gather` over group 2 from it.

    Marks the function `ds.world_size` and `ds.zero_stage` (and
    `ds.hpz_partition_size` with hpZ).
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", "1", "data-parallel ranks">,
    Option<"stage", "stage", "int64_t", "0", "ZeRO stage, 0 to 3">,
    Option<"persistenceThreshold", "param-persistence-threshold", "int64_t",
           "0", "stage 3: parameters with fewer elements stay whole">,
    Option<"reduceBucketSize", "reduce-bucket-size", "int64_t", "20000000",
           "gradients reduced by one collective, in elements (DeepSpeed's "
           "reduce_bucket_size)">,
    Option<"commDtype", "comm-dtype", "std::string", "\"fp32\"",
           "element type of the gradient collectives: fp32, bf16 or fp16 "
           "(a gradient is cast to it before its reduction and back after)">,
    Option<"prefetchBucketSize", "prefetch-bucket-size", "int64_t",
           "20000000",
           "stage 3: parameters gathered by one collective, in elements "
           "(DeepSpeed's stage3_prefetch_bucket_size)">,
    Option<"accumSteps", "accum-steps", "int64_t", "1",
           "micro-batches per step; a pipeline stage (`ds.pipeline`) with "
           "more than one at ZeRO stages 0-1 accumulates its gradients "
           "locally and reduces them once per step">,
    Option<"sumOnce", "sum-once", "bool", "false",
           "a pipeline stage with several micro-batches at ZeRO stages 2-3 "
           "also sums its gradients locally and reduces them once per step "
           "(for an optimizer that exchanges once per step)">,
    Option<"quantizeWeights", "quantize-weights", "bool", "false",
           "stage 3: gather parameters as block-wise int8 "
           "(`ds.quantized_all_gather`, ZeRO++'s qwZ)">,
    Option<"quantizeGradients", "quantize-gradients", "bool", "false",
           "stages 1-3: reduce-scatter gradients as block-wise integers by "
           "all-to-all, summed in f32 (`ds.quantized_reduce_scatter`, "
           "ZeRO++'s qgZ)">,
    Option<"quantizeBlockSize", "quantize-block-size", "int64_t", "2048",
           "elements per quantization block (one f32 scale each)">,
    Option<"gradientBits", "gradient-bits", "int64_t", "8",
           "bits of a quantized gradient element: 8 or 4">,
    Option<"hpzPartitionSize", "hpz-partition-size", "int64_t", "1",
           "stage 3: ZeRO++'s hpZ partition size H (1: off); each rank keeps "
           "its 1/H slice of every forward gather (`ds.sp_slice` over group "
           "2, the H consecutive ranks of its node) and the backward gathers "
           "from those within the node">,
  ];
}

def OptimizerPass : Pass<"ds-optimizer", "func::FuncOp"> {
  let summary = "Update every parameter from its gradient (Adam, AdamW, SGD)";
  let description = [{
    Runs after `--ds-autodiff`. For each gradient result (`ds.grad =
    "<param>"`) it builds one `ds.adam` or `ds.sgd` op and replaces the
    gradient result by the new parameter (`ds.update = "<param>"`). The
    optimizer state becomes arguments marked `ds.state = "<param>.exp_avg"`
    (zero at the start of training) whose new values are results marked
    `ds.update` too; the step counter is an argument marked `ds.step`. The
    runtime writes every `ds.update` result into the storage of the argument
    it names, so parameters and state are updated in place. With
    `grad-clip`, gradients are first scaled by `min(1, c / (norm + 1e-6))`
    of their global L2 norm (as torch's clip_grad_norm_); with `grad-accum`
    the norm is the accumulated mean gradient's (the accumulator plus this
    micro-batch's gradient, over K) and the coefficient is the update op's
    `clip` operand, applied on a step's last micro-batch. The learning-rate
    schedule is evaluated by the runtime from the step counter.

    Under ZeRO stages 1-3 (`ds.zero_stage`) a gradient is this rank's shard
    of the parameter: the update and its state cover the shard only (state
    arguments carry `ds.full_shape`); a whole parameter contributes its
    shard through `ds.shard`, and the updated shards are all-gathered back
    (in buckets of `allgather-bucket-size` elements). Clipping sums the
    shards' squares over ranks.

    A weight of a 16-bit type (after `--ds-mixed-precision`) is updated
    through an f32 master copy: a state argument `<param>.master` marked
    `ds.master_of = "<param>"` (the runtime starts it from the weight's
    initializer), of the gradient's shape. Each gradient is cast up to f32
    just before its update; the new weight is the new master cast down
    (gathered in 16 bits at stages 1-2). With the fp16 loss-scale input,
    `ds.check_overflow` reads the gradients as they are and each is
    unscaled in f32 after its cast.
  }];
  let options = [
    Option<"masterWeights", "master-weights", "bool", "false",
           "give f32 parameters an f32 master copy in the optimizer state "
           "too (offload keeps it on the host)">,
    Option<"optimizer", "optimizer", "std::string", "\"adam\"",
           "adam, adamw, sgd, lamb, onebit-adam, zero-one-adam or "
           "onebit-lamb">,
    Option<"lr", "lr", "double", "1e-3", "learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "Adam's first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "Adam's second-moment decay">,
    Option<"eps", "eps", "double", "1e-8", "Adam's epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "weight decay (decoupled for adamw)">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"dampening", "dampening", "double", "0.0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"biasCorrection", "bias-correction", "bool", "true",
           "Adam and Lamb divide the moments by 1 - beta^t">,
    Option<"maxCoeff", "lamb-max-coeff", "double", "10.0",
           "Lamb's trust ratio upper bound">,
    Option<"minCoeff", "lamb-min-coeff", "double", "0.01",
           "Lamb's trust ratio lower bound">,
    Option<"schedule", "lr-schedule", "std::string", "\"constant\"",
           "constant, warmup, warmup-cosine or warmup-linear">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0", "warmup steps">,
    Option<"totalSteps", "total-steps", "int64_t", "0",
           "steps at which the decay reaches min-lr">,
    Option<"minLr", "min-lr", "double", "0.0", "learning rate after decay">,
    Option<"gradClip", "grad-clip", "double", "0.0",
           "clip gradients to this global L2 norm (0: off)">,
    Option<"gradAccum", "grad-accum", "int64_t", "1",
           "micro-batches whose mean gradient makes one update">,
    Option<"allgatherBucketSize", "allgather-bucket-size", "int64_t",
           "20000000",
           "ZeRO stages 1-2: updated shards gathered by one collective, in "
           "elements (DeepSpeed's allgather_bucket_size)">,
    Option<"freezeStep", "freeze-step", "int64_t", "100000",
           "onebit-adam, onebit-lamb: the last warm-up step; later steps "
           "exchange the momentum compressed to 1 bit per element">,
    Option<"varFreezeStep", "var-freeze-step", "int64_t", "100000",
           "zero-one-adam: the last step that may update the variance; "
           "later steps are local steps">,
    Option<"varUpdateScaler", "var-update-scaler", "int64_t", "16",
           "zero-one-adam: variance updates before their interval doubles">,
    Option<"localStepScaler", "local-step-scaler", "int64_t", "32678",
           "zero-one-adam: frozen steps before the local-step interval "
           "doubles">,
    Option<"localStepClipper", "local-step-clipper", "int64_t", "16",
           "zero-one-adam: the largest local-step interval">,
    Option<"coeffBeta", "coeff-beta", "double", "0.9",
           "onebit-lamb: the decay of the warm-up's running average of the "
           "trust ratio, frozen after the freeze step">,
    Option<"factorMax", "factor-max", "double", "4.0",
           "onebit-lamb: the largest factor of the frozen trust ratio">,
    Option<"factorMin", "factor-min", "double", "0.5",
           "onebit-lamb: the smallest factor of the frozen trust ratio">,
    Option<"factorThreshold", "factor-threshold", "double", "0.1",
           "onebit-lamb: the largest relative change of the factor per "
           "step">,
  ];
}

def LowerToDsRtPass : Pass<"ds-lower-to-dsrt", "ModuleOp"> {
  let summary = "Lower @forward from ds tensors to dsrt buffers and kernels";
  let description = [{
    Rewrites `func.func @forward` into the buffer program `ds-run` executes:
    arguments become `dsrt.input` / `dsrt.param` buffers, `ds.constant`
    becomes `dsrt.const`, `ds.reshape` a `dsrt.view` (no copy), every other
    ds op one `dsrt.kernel` call (kernel id = the op name without `ds.`,
    attributes in `params`) writing fresh `dsrt.alloc` buffers, and the
    results `dsrt.output`s. Elementwise kernels list in `inplace` the inputs
    whose storage their output may take. 16-bit matmul and gemm get an f32
    workspace buffer as an extra output.

    ```mlir
    %0 = ds.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    // becomes
    %0 = dsrt.alloc : memref<4xf32>
    dsrt.kernel "add"(%a, %b) -> (%0) {inplace = array<i64: 0, 1>, params = {}} : ...
    ```
  }];
  let dependentDialects = ["::mlir::dsrt::DsRtDialect"];
}

def TensorParallelPass : Pass<"ds-tensor-parallel", "func::FuncOp"> {
  let summary = "Split MLP and attention blocks over a tensor-parallel group (Megatron)";
  let description = [{
    Finds, on the forward graph before autodiff, nothing by name:

    - each MLP block: one or more linear layers of one input (a matmul by a
      weight parameter, directly or through its transpose, or a Gemm with
      its bias; a gated MLP has two), optional bias adds, a region of
      elementwise ops (the activation), and a linear layer that contracts
      over that width. The first weights and biases are split by columns,
      the second by rows;
    - each attention block: a fused Q/K/V projection whose result is split
      into equal blocks, or separate projections of one input, followed
      through the reshape into heads, transposes, per-head matmuls, the
      mask, rotary embeddings (slices and concats that keep the heads) and
      the softmax to the output projection over the merged heads.
      The projections are split by heads (a fused one in blocks:
      `ds.tp_split = [axis, parts, blocks]`), the output projection by rows.

    The argument types shrink, `ds.tp_split` tells the runtime which slice
    each rank loads, `ds.tp_identity` (Megatron's f) marks a block's input
    (its gradient is summed over the group) and `ds.tp_all_reduce` (g)
    sums the partial output before the output bias. Collectives name group
    1, the tensor-parallel ranks. `size` not dividing a width or the heads
    is an error; no block found is an error unless `--ds-vocab-parallel`
    has a vocabulary to split. Marks the function `ds.tensor_parallel`.

    ```mlir
    %h = ds.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %r = ds.relu %h : tensor<2x8xf32>
    %y = ds.matmul %r, %w2 : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    // becomes, with size=2 (%w1 {ds.tp_split = [1, 2]}, %w2 {ds.tp_split = [0, 2]})
    %f = ds.tp_identity %x {group = 1 : i64} : tensor<2x4xf32>
    %h = ds.matmul %f, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %r = ds.relu %h : tensor<2x4xf32>
    %p = ds.matmul %r, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %y = ds.tp_all_reduce %p {group = 1 : i64} : tensor<2x4xf32>
    ```

    With its options it then runs `--ds-vocab-parallel` (`vocab-parallel`,
    on by default) and `--ds-sequence-parallel` (`sequence-parallel`) on
    the same function, in that order; a pipeline may instead add the three
    passes one after the other (with `vocab-parallel=false` here).
  }];
  let options = [
    Option<"size", "size", "int64_t", "1", "ranks in the tensor-parallel group">,
    Option<"sequence", "sequence-parallel", "bool", "false",
           "then run --ds-sequence-parallel: keep the activations between "
           "the blocks in row blocks of their leading dimension "
           "(reduce-scatter and all-gather instead of all-reduce)">,
    Option<"vocab", "vocab-parallel", "bool", "true",
           "then run --ds-vocab-parallel: split the vocabulary of the "
           "output layer and the embedding tables too">,
  ];
}

def VocabParallelPass : Pass<"ds-vocab-parallel", "func::FuncOp"> {
  let summary = "Split output layers and embedding tables by vocabulary rows (Megatron)";
  let description = [{
    Runs on the forward graph before autodiff, after `--ds-tensor-parallel`
    (a table that pass already split is left alone). Finds the output layer
    of a softmax cross entropy (a linear layer by a `[V, D]` or `[D, V]`
    parameter, the logits reaching the loss through reshapes that keep the
    classes last) and its tied embedding, or an embedding table looked up
    by token ids (indices from the graph's inputs), and splits it by rows:
    `ds.vocab_gather` plus a group sum for each lookup,
    `ds.vocab_cross_entropy` for the loss, `ds.tp_identity` on the output
    layer's input. When `size` does not divide V each rank holds
    ceil(V / size) rows, zero past the end (`ds.tp_split = [axis, size, 1,
    V]`; the ops take `vocab = V` and leave the padding out). The split
    logits stop being results of the graph. Marks the function
    `ds.vocab_parallel` (and `ds.tensor_parallel`); finding nothing
    changes nothing.

    ```mlir
    %e = ds.gather %wte, %idx {axis = 0 : i64} : (tensor<6x4xf32>, tensor<1x2xi64>) -> tensor<1x2x4xf32>
    // becomes, with size=2 (%wte: tensor<3x4xf32> {ds.tp_split = [0, 2]})
    %v = ds.vocab_gather %wte, %idx {group = 1 : i64} : (tensor<3x4xf32>, tensor<1x2xi64>) -> tensor<1x2x4xf32>
    %e = ds.tp_all_reduce %v {group = 1 : i64} : tensor<1x2x4xf32>
    ```
  }];
  let options = [
    Option<"size", "size", "int64_t", "1", "ranks in the tensor-parallel group">,
  ];
}

def SequenceParallelPass : Pass<"ds-sequence-parallel", "func::FuncOp"> {
  let summary = "Keep the activations between tensor-parallel blocks split by rows (Megatron)";
  let description = [{
    Runs after `--ds-tensor-parallel` (and `--ds-vocab-parallel`), with the
    same `size`. Every group sum becomes `ds.sp_reduce_scatter` over its
    token dimension (the one before the features, the sequence of
    `[b, s, h]`, when `size` divides it, else the leading one); the ops
    after it that work row by row (elementwise, layer_norm, softmax and
    reductions over later axes, reshapes and matmuls that keep the split
    dimension, by their `SplitAxisOpInterface` rule) run on the rank's
    rows; a block's input f becomes `ds.sp_all_gather` (its gradient a
    reduce-scatter), any other reader gathers the rows whole. Parameters
    and other values those ops broadcast get `ds.tp_identity` (their
    gradients are partial sums over the rows), replicated full-size
    operands `ds.sp_slice`. Dropout is not split (its random stream follows
    the element's place in the whole tensor). No group sum `size` divides
    is an error. Marks the function `ds.sequence_parallel`.

    ```mlir
    %e = ds.tp_all_reduce %v {group = 1 : i64} : tensor<1x2x4xf32>
    %x = ds.add %e, %p : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x4xf32>
    // becomes, with size=2 (this rank's token of the two)
    %e = ds.sp_reduce_scatter %v {axis = 1 : i64, group = 1 : i64} : tensor<1x2x4xf32> -> tensor<1x1x4xf32>
    %q = ds.sp_slice %p {axis = 0 : i64, group = 1 : i64} : tensor<2x4xf32> -> tensor<1x4xf32>
    %x = ds.add %e, %q : (tensor<1x1x4xf32>, tensor<1x4xf32>) -> tensor<1x1x4xf32>
    ```
  }];
  let options = [
    Option<"size", "size", "int64_t", "1", "ranks in the tensor-parallel group">,
  ];
}

def OffloadPass : Pass<"ds-offload", "func::FuncOp"> {
  let summary = "Keep optimizer state and parameter shards in host memory or on NVMe";
  let description = [{
    Runs after `--ds-optimizer` (and ZeRO). With `optimizer=host|nvme` the
    optimizer state, f32 master copies included, is stored there (argument
    attribute `ds.space`), and the optimizer ops that read it run on the
    host (`ds.on_host`), as does every op whose tensors are all on the
    host; a cast or scale whose only users are host ops moves to the host
    too, so a gradient crosses in its own type. With `param=host|nvme`
    (ZeRO-3 only) the parameter shards are stored there as well.

    Explicit `ds.transfer` ops move values between spaces: to the host
    right after the device value is made (the copy overlaps what follows),
    to the device right before a device op reads a host value, NVMe reads
    one optimizer op ahead of their reader, and NVMe writes right after
    the update. Values are unchanged: losses are bit-identical with and
    without offload.

    ```mlir
    %gh = ds.transfer %g {to = "host"} : tensor<64xf32>
    %p, %m, %v = ds.adam %w, %gh, %m0, %v0, %step {ds.on_host, ...}
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"none\"",
           "where the optimizer state lives: none (device), host or nvme">,
    Option<"param", "param", "std::string", "\"none\"",
           "where ZeRO-3 parameter shards live: none (device), host or nvme">,
  ];
}

def OffloadActivationsPass : Pass<"ds-offload-activations", "func::FuncOp"> {
  let summary = "Keep the forward pass's saved activations in host memory until the backward pass reads them";
  let description = [{
    Runs after `--ds-recompute`, ZeRO, the optimizer and `--ds-offload`.
    With `to=host`, every tensor the forward pass makes (from the data, not
    from parameters alone) that the backward pass reads, of at least
    `min-bytes` bytes and not a result of the function, is copied to the
    host right after its last forward reader (`ds.transfer {to = "host"}`)
    and copied back (`ds.transfer {to = "device"}`) one reader of fetched
    activations ahead of its first backward reader, so the copy overlaps
    the op before it; the backward pass reads the copy. The device buffer
    dies at the first transfer, so the device peak falls by what is saved
    across the loss; the host arena holds the copies. Values are unchanged:
    losses are bit-identical with and without it. Recompute decisions come
    first: a recomputed segment's kept input is what crosses.

    ```mlir
    %a = ds.gelu %x : tensor<4x64x512xf32>
    %y = ds.matmul %a, %w ...                   // last forward reader
    %ah = ds.transfer %a {to = "host"} : tensor<4x64x512xf32>
    ...                                         // the loss
    %ad = ds.transfer %ah {to = "device"} : tensor<4x64x512xf32>
    %g = ds.matmul %dy, %ad ...                 // first backward reader
    ```
  }];
  let options = [
    Option<"to", "to", "std::string", "\"none\"",
           "where saved activations wait for the backward pass: none (the device) or host">,
    Option<"minBytes", "min-bytes", "int64_t", "65536",
           "only activations of at least this many bytes are offloaded">,
  ];
}

def OverlapCommPass : Pass<"dsrt-overlap-comm", "func::FuncOp"> {
  let summary = "Start collectives early and wait for them just before their results are read";
  let options = [
    Option<"maxInFlight", "max-in-flight", "int64_t", "2",
           "collectives in flight at once">,
  ];
  let description = [{
    Runs on the lowered buffer program, before `--dsrt-plan-memory`. A
    collective kernel (`all_reduce`, `all_gather`, `reduce_scatter`) whose
    result is first read after other kernels becomes asynchronous
    (`async = 1` in its params) and a `wait` kernel reading the
    collective's inputs and outputs goes just before the first kernel that
    reads the result (directly or through a view). The kernels in between
    run while the communication progresses; the memory plan keeps every
    buffer the collective touches alive until the wait. A collective read
    at once stays synchronous. At most `max-in-flight` collectives run at
    once: the collective that would exceed it is preceded by the wait of
    the oldest, which bounds the buffers the communication holds (each
    gradient bucket in flight keeps its whole input).

    ```mlir
    dsrt.kernel "reduce_scatter"(%g) -> (%s) {params = {async = 1 : i64, ...}}
    dsrt.kernel "matmul"(...) -> (...)        // overlaps the communication
    dsrt.kernel "wait"(%g, %s) -> () {params = {}}
    dsrt.kernel "adam"(%p, %s, ...) -> (...)
    ```
  }];
}

def PlanMemoryPass : Pass<"dsrt-plan-memory", "func::FuncOp"> {
  let summary = "Place arena buffers at static offsets from exact liveness";
  let description = [{
    Gives every `dsrt.alloc` an `offset` in one arena and sets the function's
    `dsrt.arena_bytes` (the planned peak). A buffer lives from the op that
    first writes it to the last op that reads it or a view of it (graph
    outputs to the end). An output takes the storage of an `inplace` input
    that dies at the same kernel and has its size (one block of the arena).
    Blocks (64-byte aligned) get the offsets of the smallest of first fit in
    program order and best fit greedy by size, lifetime and breadth, each
    improved by moving the blocks that reach the top to the front
    (lib/Transforms/ArenaAssign.cpp). `dsrt.arena_bytes` is the end of the
    highest buffer. The pass checks its own result: no two buffers that are
    live at once overlap.
  }];
}

def TrainableSetPass : Pass<"ds-trainable-set", "ModuleOp"> {
  let summary = "Decide which parameters training updates (frozen layers, buffers, padding rows)";
  let description = [{
    A plain `torch.onnx.export` writes parameters and buffers alike as
    initializers; `ds.export` (python/ds) records the trainable, frozen and
    buffer initializers and each embedding's `padding_idx` in the model's
    `metadata_props`, which the importer keeps as the module attribute
    `ds.export_record`. This pass keeps `ds.trainable` (set by the importer
    on float parameters that reach the loss) only on the parameter arguments
    of `@forward` that are trained, marks frozen ones `ds.frozen` and leaves
    buffers unmarked; a recorded `padding_idx` becomes the argument
    attribute `ds.padding_idx`, and each lookup of that table (`ds.gather`
    on axis 0) is marked `ds.padding_idx` too: its gradient rule gives the
    padding row no gradient from that lookup, as PyTorch does (other uses
    of a tied table are not masked).

    Without a record every parameter that reaches the loss stays trainable
    and the pass warns once, naming how many, unless `trainable` or `freeze`
    is given. `trainable` (a regular expression, matched anywhere in the
    name) names the whole trainable set; `freeze` takes its matches out of
    it. (The importer refuses a record of an export that was not in
    training mode.)

    ```mlir
    module attributes {ds.export_record = {"ds.mode" = "training",
        "ds.trainable" = "[\"w\"]", "ds.frozen" = "[\"f\"]", ...}} {
      func.func @forward(%w: ... {ds.param = "w", ds.trainable},
                         %f: ... {ds.param = "f", ds.trainable})
    // becomes
      func.func @forward(%w: ... {ds.param = "w", ds.trainable},
                         %f: ... {ds.frozen, ds.param = "f"})
    ```
  }];
  let options = [
    Option<"freeze", "freeze", "std::string", "\"\"",
           "Parameters whose name matches this regular expression are not "
           "trained">,
    Option<"trainable", "trainable", "std::string", "\"\"",
           "Only parameters whose name matches this regular expression are "
           "trained">,
  ];
}

def FoldTransposePass : Pass<"ds-fold-transpose", "func::FuncOp"> {
  let summary = "fold transposes into GEMM operands instead of copying them";
  let description = [{
    Issue 24: a compiled step should not copy a tensor to transpose it for a
    GEMM. Two rewrites, after the last canonicalization (the lowering reads a
    transpose of the last two dimensions that only matmuls use as
    `trans_a`/`trans_b`):

    - `transpose(matmul(a, b))` swapping the last two dimensions, the
      matmul's only user, becomes `matmul(transpose(b), transpose(a))`: the
      new transposes are read transposed by the kernel, or compose with (or
      cancel) the transpose `a` or `b` came from. A Linear layer's weight gradient
      (autodiff writes `(x^T g)^T` for the transposed weight PyTorch
      exports) becomes `g^T x` with no copy.
    - a transpose of rank >= 3 (f32) that keeps its input's innermost
      dimension as one of the last two, read only by matmuls (attention's
      `[B, T, H, d] -> [B, H, T, d]` and `-> [B, H, d, T]`), is marked
      `ds.gemm_operand`: the lowering passes the untransposed input and the
      permutation (`perm_a`/`perm_b`) to the matmul kernel, a strided
      batched GEMM, instead of copying. The same holds for a transpose
      read as `ds.fused_attention`'s query, key or value or its gradient's
      output gradient when the innermost dimension stays last (`perm_q`,
      `perm_k`, `perm_v`, `perm_grad`: the kernels read each head's rows
      through a row stride).

    ```mlir
    %kt = ds.transpose %k {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x4x16xf32> -> tensor<2x4x16x8xf32>
    %s = ds.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
    // becomes
    %kt = ds.transpose %k {ds.gemm_operand, perm = array<i64: 0, 2, 3, 1>} : ...
    // lowered to dsrt.kernel "matmul"(%q, %k) {params = {perm_b = array<i64: 0, 2, 3, 1>}}
    ```
  }];
}

def FuseElementwisePass : Pass<"ds-fuse-elementwise", "func::FuncOp"> {
  let summary = "fuse chains of f32 elementwise ops into one kernel";
  let description = [{
    Issue 24 item 1: the memory-bound elementwise work of a step (bias adds,
    the tanh-GELU chain, residual adds, scales and masks, the mul/add chains
    autodiff writes for their gradients) runs as one kernel per chain
    instead of one per op, with no intermediate tensor in the memory plan.

    Walking @forward in program order, an f32 elementwise op (add, sub, mul,
    div, pow, max, min, neg, abs, exp, log, sqrt, reciprocal, erf, tanh,
    relu, sigmoid; where with an i1 condition) absorbs each operand that an
    op of that list (or an earlier fused op) produces when
    - the producer's only user is the op (no value computed twice),
    - the producer's result has the op's type (a broadcast operand is read
      by strides, never recomputed per element),
    - both carry no mark but `ds.recompute` (equal on both), and lie on the
      same side of the optimizer's first step and of pipeline marks;
    - nothing but constants and the op's other absorbed producers lies
      between the producer and the op (the fused op runs at the op's place,
      so its inputs would otherwise live longer and raise the arena's peak);
    and becomes one `ds.fused_elementwise` whose program lists the chain
    (include/ds/Support/FusedProgram.h); splat f32 constants become its
    immediates. At most 64 registers (inputs and instructions) per fused
    op. Runs last in the training passes (after --ds-fold-transpose and
    offload), on f32 only. The CPU kernel computes each instruction with
    the expression of the unfused kernel (bit-identical results).

    ```mlir
    %s = ds.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %t = ds.tanh %s : tensor<4x8xf32>
    // becomes
    %t = ds.fused_elementwise %x, %b {program = array<i64: 1, 0, 1, 0, 15, 2, 0, 0>}
         : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
}

def FuseOptimizerPass : Pass<"ds-fuse-optimizer", "func::FuncOp"> {
  let summary = "fuse the per-parameter optimizer steps into multi-tensor ops";
  let description = [{
    Issue 24 item 3: the optimizer pass writes one `ds.adam` (`ds.sgd`) per
    parameter, each a kernel call of its own; a GPT's biases and LayerNorm
    gains make most of them tiny. This pass groups, in program order, the
    updates of one kind with identical attributes (hyper-parameters,
    schedule) and the same step counter into one `ds.multi_adam`
    (`ds.multi_sgd`), whose kernel walks all their tensors as one flat
    index space over the run's threads with the single kernel's
    per-element arithmetic (bit-identical results).

    The fused op takes the place of the group's first update, so an update
    joins a group only when every operand it reads already exists there
    and nothing between the two reads the parameter or state it
    overwrites; otherwise it starts a new group. With `hoist-operands`
    (on), an operand made between the two by layout ops alone (`ds.reshape`,
    `ds.shard`, `ds.concat` and `ds.constant`: ZeRO 1-2's shard copy of the
    parameter, flattened and padded to a multiple of the ranks) counts as
    existing there: those ops move before the first update, marked
    `ds.update_operand` so that lowering keeps them in the optimizer phase,
    unless an update from the first on reads what they read (it would
    overwrite it first), and unless the group's moved copies would pass
    `hoist-limit` bytes (then it starts a new group: the copies stay in
    cache for their update). The results are the same values, written into the
    same storage (`ds.update`), so the memory plan sees no new buffer; the
    moved copies and the gradient shards are then all live at the fused
    update, and the compile driver turns `hoist-operands` off where that
    raises the planned peak. Left as they are: Lamb and `norm_over_ranks`,
    gradient accumulation (`grad_accum`), a clip coefficient operand,
    offloaded (`ds.on_host`) updates, non-f32 parameters, and groups of
    one. In practice the GPTs' fp32 updates at ZeRO 0-3 (and plain data
    parallelism) fuse whole; under bf16/fp16 each update reads the f32
    cast of its gradient and with gradient clipping the clipped gradient
    (not layout ops), so they stay one per parameter.

    ```mlir
    %p0, %m0, %v0 = ds.adam %w, %gw, %mw, %vw, %step {...} : ...
    %p1, %m1, %v1 = ds.adam %b, %gb, %mb, %vb, %step {...} : ...
    // becomes
    %r:6 = ds.multi_adam params(%w, %b) grads(%gw, %gb) exp_avgs(%mw, %mb)
        exp_avg_sqs(%vw, %vb) step(%step) {...} : ...
    ```
  }];
  let options = [
    Option<"hoistOperands", "hoist-operands", "bool", "true",
           "move the layout ops that make a later update's operands (ZeRO "
           "1-2's shard copies) before the group's first update, so that "
           "the update joins the group">,
    Option<"hoistLimit", "hoist-limit", "int64_t", "1048576",
           "the most bytes of copies moved before one fused update; a "
           "member whose copy would exceed it starts a new group (the "
           "copies stay in cache for their update, and fewer are live at "
           "once)">,
  ];
}

def SyncBatchNormPass : Pass<"ds-sync-batchnorm", "func::FuncOp"> {
  let summary = "BatchNormalization statistics over the data-parallel ranks";
  let description = [{
    The importer spells a training-mode BatchNormalization with two partial
    sums over the rank's batch (`ds.reduce_sum` marked `ds.batch_stat`: the
    sum and the centered sum of squares) and divisions by the count (`ds.div`
    by a constant, marked `ds.batch_count` = 0, or 1 for the unbiased
    variance's n - 1). With `size` data-parallel ranks this pass sums each
    partial sum over data-parallel group 0 (`ds.all_reduce` "sum", an f32
    island) and divides by the global count, `size * n - offset`: every
    rank normalizes with the global batch's mean and (two-pass, centered)
    variance and updates the running statistics with them, as PyTorch's
    SyncBatchNorm does. The gradient of the all-reduce is the all-reduce of
    the gradients, so the backward pass sums the two gradient reductions over
    the ranks too. Runs before autodiff; `size` 1 changes nothing.

    ```mlir
    %s = ds.reduce_sum %x {axes = array<i64: 0>, ds.batch_stat, keepdims = true} : ...
    %m = ds.div %s, %n {ds.batch_count = 0 : i64} : ...   // %n = 8
    // becomes, with size = 2
    %s = ds.reduce_sum %x {axes = array<i64: 0>, ds.batch_stat, keepdims = true} : ...
    %g = ds.all_reduce %s {group = 0 : i64, reduction = "sum"} : ...
    %m = ds.div %g, %n2 {ds.batch_count = 0 : i64} : ...  // %n2 = 16
    ```
  }];
  let options = [
    Option<"size", "size", "int64_t", "1", "data-parallel ranks">,
  ];
}

def FuseAttentionPass : Pass<"ds-fuse-attention", "func::FuncOp"> {
  let summary = "fuse softmax(Q K^T * scale + mask) V into ds.fused_attention";
  let description = [{
    Issue 24 item 2: attention runs as one tiled kernel with an online
    softmax (FlashAttention-2 style) that saves the output and one
    logsumexp per query row for the backward pass, O(T) per head, instead
    of the T x T scores and probabilities; its gradient recomputes the
    probabilities block by block.

    Rooted at each f32 `ds.softmax` over the last axis whose only user is a
    `ds.matmul` reading it as the left operand (P V), the pass walks up
    the scores, each op used only by the next:
    - optionally a mask: `ds.where` with an i1 condition and a splat f32
      constant as one branch (`fill_true` / `fill_false`), or a `ds.add` of
      an f32 tensor that broadcasts to the scores and depends on no
      trainable parameter (`add`; the fused op gives the mask no gradient);
    - optionally a scale: `ds.mul` or `ds.div` by a splat f32 constant;
    - the `ds.matmul` Q K^T, whose right operand (K^T) is a transpose of
      the last two dimensions of K (composed with the transpose that made
      it, when there is one).
    Query, key and value must be f32 of one rank >= 3 with equal batch
    dimensions. Anything else is left alone: dropout on the probabilities
    (the softmax then feeds a `ds.dropout`, not the matmul), probabilities
    used twice (nn.MultiheadAttention's averaged weights), a scale or mask
    that is not a splat constant. Runs before autodiff (after mixed
    precision: 16-bit attention is not fused yet), so the VJP of the fused
    op is `ds.fused_attention_grad`.

    ```mlir
    %s = ds.matmul %q, %kt : (...) -> tensor<2x4x32x32xf32>
    %t = ds.mul %s, %c0_25 : ...
    %u = ds.where %m, %cNegInf, %t : ...
    %p = ds.softmax %u {axis = 3 : i64} : tensor<2x4x32x32xf32>
    %o = ds.matmul %p, %v : (...) -> tensor<2x4x32x16xf32>
    // becomes
    %o, %lse = ds.fused_attention %q, %k, %v, %m {fill = 0xFFF0000000000000 : f64,
        mask_kind = "fill_true", scale = 2.500000e-01 : f64} : ...
    ```
  }];
}

#endif // DS_TRANSFORMS_PASSES_TD
